/* telldir, seekdir and readdir_r on a directory of argv[1] with 300 entries (more
 * than one batch of the stream): a seek back to any recent position resumes there,
 * including one entry back (GlusterFS's bricks do that when an entry does not fit
 * their reply) and between the dots. Prints "seekdir ok" and exits 0, or names the
 * failing line. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "seekdir.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                        \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

#define N 300

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/seekdir.d", argv[1]);
    CHECK(mkdir(dir, 0755) == 0);
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof path, "%s/f%03d", dir, i);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        CHECK(fd >= 0 && close(fd) == 0);
    }
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    static char names[N + 2][256];
    static long pos[N + 3]; /* pos[i]: telldir before entry i */
    int n = 0;
    struct dirent *e;
    pos[0] = telldir(d);
    while ((e = readdir(d)) != NULL) {
        CHECK(n < N + 2);
        snprintf(names[n], sizeof names[n], "%s", e->d_name);
        pos[++n] = telldir(d);
    }
    CHECK(n == N + 2);
    /* Back to the middle, then on to the end. */
    seekdir(d, pos[200]);
    CHECK(telldir(d) == pos[200]);
    for (int i = 200; i < n; i++) {
        e = readdir(d);
        CHECK(e != NULL && strcmp(e->d_name, names[i]) == 0);
    }
    CHECK(readdir(d) == NULL);
    /* One entry back, as a reader whose buffer is full does. */
    seekdir(d, pos[150]);
    e = readdir(d);
    CHECK(e != NULL && strcmp(e->d_name, names[150]) == 0);
    seekdir(d, pos[150]);
    e = readdir(d);
    CHECK(e != NULL && strcmp(e->d_name, names[150]) == 0);
    /* Between the dots, and with readdir_r. */
    seekdir(d, pos[1]);
    struct dirent ent, *res;
    CHECK(readdir_r(d, &ent, &res) == 0 && res == &ent && strcmp(ent.d_name, names[1]) == 0);
    CHECK(readdir_r(d, &ent, &res) == 0 && res == &ent && strcmp(ent.d_name, names[2]) == 0);
    seekdir(d, 0);
    e = readdir(d);
    CHECK(e != NULL && strcmp(e->d_name, names[0]) == 0);
    CHECK(closedir(d) == 0);
    printf("seekdir ok\n");
    return 0;
}
