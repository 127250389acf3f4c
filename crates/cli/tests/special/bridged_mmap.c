/* mmap from a bridged process (run through `augefs run`): the owner writes
 * /augefs/m, a forked child (which reaches the image through the owner's FUSE bridge,
 * direct IO) maps it MAP_SHARED, reads it, stores into it and msyncs; a MAP_PRIVATE
 * mapping reads it too. The owner then reads the child's bytes through its own calls.
 * Prints "mmap ok", or names the failing line and errno. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c)                                                                         \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "bridged_mmap.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                             \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define SIZE 16384
#define STORE "stored by a bridged child"

static int child(void) {
    int fd = open("/augefs/m", O_RDWR);
    CHECK(fd >= 0);
    char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    for (int i = 0; i < SIZE; i++)
        CHECK(p[i] == (char)('a' + i % 26));
    memcpy(p + 5000, STORE, strlen(STORE));
    CHECK(msync(p, SIZE, MS_SYNC) == 0);
    CHECK(munmap(p, SIZE) == 0);
    char *q = mmap(NULL, SIZE, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(q != MAP_FAILED);
    CHECK(memcmp(q + 5000, STORE, strlen(STORE)) == 0);
    CHECK(munmap(q, SIZE) == 0);
    CHECK(close(fd) == 0);
    return 0;
}

int main(void) {
    char buf[SIZE];
    for (int i = 0; i < SIZE; i++)
        buf[i] = (char)('a' + i % 26);
    int fd = open("/augefs/m", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, buf, SIZE) == SIZE);
    CHECK(close(fd) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(child());
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fd = open("/augefs/m", O_RDONLY);
    CHECK(fd >= 0);
    char got[SIZE];
    CHECK(pread(fd, got, SIZE, 0) == SIZE);
    memcpy(buf + 5000, STORE, strlen(STORE));
    CHECK(memcmp(got, buf, SIZE) == 0);
    CHECK(close(fd) == 0);
    printf("mmap ok\n");
    return 0;
}
