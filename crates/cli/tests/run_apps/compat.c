/* The libc functions glibc builds on its own inner calls (utime, remove, lockf,
 * statvfs, sync, pathconf, the mkstemp family), on /augefs through `augefs run`:
 * each must act on augefs, not on the host (where /augefs does not exist). Prints
 * "compat ok" and exits 0, or names the failing line and errno. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            fprintf(stderr, "compat.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                       \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static time_t mtime_of(const char *p) {
    struct stat st;
    CHECK(lstat(p, &st) == 0);
    return st.st_mtime;
}

int main(void) {
    CHECK(mkdir("/augefs/k", 0755) == 0);
    int fd = open("/augefs/k/f", O_RDWR | O_CREAT, 0644);
    CHECK(fd >= 0 && write(fd, "0123456789", 10) == 10);

    /* The utime family sets the times it is given. */
    struct utimbuf ub = {.actime = 1000, .modtime = 2000};
    CHECK(utime("/augefs/k/f", &ub) == 0 && mtime_of("/augefs/k/f") == 2000);
    struct timeval tv[2] = {{3000, 0}, {4000, 0}};
    CHECK(futimes(fd, tv) == 0 && mtime_of("/augefs/k/f") == 4000);
    tv[1].tv_sec = 5000;
    CHECK(futimesat(AT_FDCWD, "/augefs/k/f", tv) == 0 && mtime_of("/augefs/k/f") == 5000);
    CHECK(symlink("f", "/augefs/k/l") == 0);
    tv[1].tv_sec = 6000;
    CHECK(lutimes("/augefs/k/l", tv) == 0 && mtime_of("/augefs/k/l") == 6000);
    CHECK(mtime_of("/augefs/k/f") == 5000);
    CHECK(utime("/augefs/k/f", NULL) == 0 && mtime_of("/augefs/k/f") > 5000);
    CHECK(utime("/augefs/k/none", &ub) == -1 && errno == ENOENT);

    /* lchmod cannot change a link's mode on Linux. */
    CHECK(lchmod("/augefs/k/l", 0600) == -1 && errno == EOPNOTSUPP);

    /* statvfs and fstatvfs report augefs, pathconf its limits. */
    struct statvfs v;
    CHECK(statvfs("/augefs/k/f", &v) == 0 && v.f_bsize == 4096 && v.f_namemax == 255);
    CHECK(v.f_blocks > 0 && v.f_bfree <= v.f_blocks);
    CHECK(fstatvfs(fd, &v) == 0 && v.f_namemax == 255);
    CHECK(statvfs("/augefs/k/none", &v) == -1 && errno == ENOENT);
    CHECK(pathconf("/augefs/k/f", _PC_NAME_MAX) == 255);
    CHECK(fpathconf(fd, _PC_PATH_MAX) == 4096);
    CHECK(pathconf("/augefs/k/none", _PC_NAME_MAX) == -1 && errno == ENOENT);

    /* lockf: a real record lock, seen by another process. */
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK(lockf(fd, F_TLOCK, 5) == 0 && lockf(fd, F_TEST, 5) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        int cfd = open("/augefs/k/f", O_RDWR);
        if (cfd < 0) _exit(10);
        if (lockf(cfd, F_TEST, 5) != -1 || (errno != EACCES && errno != EAGAIN)) _exit(11);
        if (lseek(cfd, 5, SEEK_SET) != 5 || lockf(cfd, F_TLOCK, 5) != 0) _exit(12);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(lockf(fd, F_ULOCK, 5) == 0);

    /* remove: a file, then an empty directory. */
    int g = open("/augefs/k/g", O_WRONLY | O_CREAT, 0644);
    CHECK(g >= 0 && close(g) == 0);
    CHECK(remove("/augefs/k/g") == 0 && access("/augefs/k/g", F_OK) == -1 && errno == ENOENT);
    CHECK(mkdir("/augefs/k/d", 0755) == 0 && remove("/augefs/k/d") == 0);
    CHECK(remove("/augefs/k/none") == -1 && errno == ENOENT);

    /* The mkstemp family: the Xs replaced, the file made exclusively, mode 0600. */
    char t1[] = "/augefs/k/tmpXXXXXX";
    int m = mkstemp(t1);
    CHECK(m >= 0 && strncmp(t1, "/augefs/k/tmp", 13) == 0 && strcmp(t1 + 13, "XXXXXX") != 0);
    CHECK(write(m, "tmp", 3) == 3 && close(m) == 0);
    struct stat st;
    CHECK(stat(t1, &st) == 0 && st.st_size == 3 && (st.st_mode & 0777) == 0600);
    char t2[] = "/augefs/k/sXXXXXX.txt";
    m = mkostemps(t2, 4, O_CLOEXEC);
    CHECK(m >= 0 && strcmp(t2 + strlen(t2) - 4, ".txt") == 0 && (fcntl(m, F_GETFD) & FD_CLOEXEC));
    CHECK(close(m) == 0 && access(t2, F_OK) == 0);
    char bad[] = "/augefs/k/noXs";
    CHECK(mkstemp(bad) == -1 && errno == EINVAL);
    char t3[] = "/augefs/k/dirXXXXXX";
    CHECK(mkdtemp(t3) == t3 && stat(t3, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);

    /* get_current_dir_name inside augefs; sync reaches augefs. */
    CHECK(chdir("/augefs/k") == 0);
    char *cwd = get_current_dir_name();
    CHECK(cwd != NULL && strcmp(cwd, "/augefs/k") == 0);
    free(cwd);
    sync();
    CHECK(close(fd) == 0);
    puts("compat ok");
    return 0;
}
