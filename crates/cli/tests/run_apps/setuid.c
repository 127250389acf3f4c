/* A program under `augefs run` as root that drops to nobody: augefs checks its later
 * calls as nobody (EACCES where root would pass) and gives its new files nobody's
 * owner. Prints "setuid ok" and exits 0, or names the failing line. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(c)                                                                     \
    do {                                                                             \
        if (!(c)) {                                                                  \
            fprintf(stderr, "setuid.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                         \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

int main(void) {
    CHECK(mkdir("/augefs/private", 0700) == 0);
    CHECK(mkdir("/augefs/public", 0777) == 0 && chmod("/augefs/public", 01777) == 0);
    int fd = open("/augefs/private/secret", O_WRONLY | O_CREAT, 0600);
    CHECK(fd >= 0 && write(fd, "s", 1) == 1 && close(fd) == 0);
    CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
    CHECK(open("/augefs/private/secret", O_RDONLY) == -1 && errno == EACCES);
    CHECK(access("/augefs/private", X_OK) == -1 && errno == EACCES);
    CHECK(mkdir("/augefs/nope", 0755) == -1 && errno == EACCES);
    fd = open("/augefs/public/mine", O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    struct stat st;
    CHECK(stat("/augefs/public/mine", &st) == 0 && st.st_uid == 65534 && st.st_gid == 65534);
    puts("setuid ok");
    return 0;
}
