/* Every path-taking call the interposer routes, given an invalid path pointer, fails
 * with EFAULT as the kernel's would, and the program lives on: once with the working
 * directory on the host, once inside /augefs. Prints "badptr ok" and exits 0, or names
 * the failing line. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define BAD ((const char *)0xDEADC0DE)

#define FAULTS(c)                                                                     \
    do {                                                                              \
        errno = 0;                                                                    \
        long r_ = (long)(c);                                                          \
        if (r_ != -1 || errno != EFAULT) {                                            \
            fprintf(stderr, "badptr.c:%d: %s gave %ld (errno %d: %s), not EFAULT\n", \
                    __LINE__, #c, r_, errno, strerror(errno));                        \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

#define NULLS(c)                                                                      \
    do {                                                                              \
        errno = 0;                                                                    \
        if ((c) != NULL || errno != EFAULT) {                                         \
            fprintf(stderr, "badptr.c:%d: %s did not fail with EFAULT (errno %d)\n",  \
                    __LINE__, #c, errno);                                             \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static void all_calls(void) {
    struct stat st;
    char buf[64];
    struct timeval tv[2] = {{0, 0}, {0, 0}};
    FAULTS(access(BAD, F_OK));
    FAULTS(chmod(BAD, 0600));
    FAULTS(chown(BAD, 0, 0));
    FAULTS(lchown(BAD, 0, 0));
    FAULTS(truncate(BAD, 0));
    FAULTS(link(BAD, "/augefs/l"));
    FAULTS(link("/augefs/f", BAD));
    FAULTS(mkdir(BAD, 0755));
    FAULTS(mkfifo(BAD, 0644));
    FAULTS(mknod(BAD, S_IFREG | 0644, 0));
    FAULTS(open(BAD, O_RDONLY));
    FAULTS(open(BAD, O_WRONLY | O_CREAT, 0644));
    FAULTS(openat(AT_FDCWD, BAD, O_RDONLY));
    FAULTS(creat(BAD, 0644));
    FAULTS(rename(BAD, "/augefs/g"));
    FAULTS(rename("/augefs/f", BAD));
    FAULTS(rmdir(BAD));
    FAULTS(symlink(BAD, "/augefs/s"));
    FAULTS(symlink("/augefs/f", BAD));
    FAULTS(unlink(BAD));
    FAULTS(stat(BAD, &st));
    FAULTS(lstat(BAD, &st));
    FAULTS(fstatat(AT_FDCWD, BAD, &st, 0));
    FAULTS(readlink(BAD, buf, sizeof buf));
    FAULTS(utimes(BAD, tv));
    FAULTS(chdir(BAD));
    NULLS(opendir(BAD));
    NULLS(fopen(BAD, "r"));
    NULLS(realpath(BAD, NULL));
}

int main(void) {
    FILE *f = fopen("/augefs/f", "w");
    if (f == NULL || fputs("x\n", f) < 0 || fclose(f) != 0) {
        perror("badptr.c: /augefs/f");
        return 1;
    }
    all_calls();
    if (chdir("/augefs") != 0) {
        perror("badptr.c: chdir /augefs");
        return 1;
    }
    all_calls();
    /* The file system still works. */
    struct stat st;
    if (stat("f", &st) != 0 || st.st_size != 2) {
        perror("badptr.c: stat f");
        return 1;
    }
    puts("badptr ok");
    return 0;
}
