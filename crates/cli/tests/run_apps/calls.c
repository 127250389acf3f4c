/* Exercises the interposer's calls on /augefs (run through `augefs run`). Prints
 * "calls ok" and exits 0, or names the failing line and errno. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "calls.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                      \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

int main(void) {
    char buf[8192];
    CHECK(mkdir("/augefs/c", 0755) == 0);
    int d = open("/augefs/c", O_RDONLY | O_DIRECTORY);
    CHECK(d >= 0);
    int fd = openat(d, "f", O_RDWR | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0);
    CHECK(openat(d, "f", O_RDWR | O_CREAT | O_EXCL, 0644) == -1 && errno == EEXIST);
    CHECK(write(fd, "hello ", 6) == 6);
    struct iovec iov[2] = {{"wor", 3}, {"ld", 2}};
    CHECK(writev(fd, iov, 2) == 5);
    CHECK(pwrite(fd, "H", 1, 0) == 1);
    CHECK(pread(fd, buf, sizeof buf, 0) == 11 && memcmp(buf, "Hello world", 11) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 11);
    /* dup shares the offset; fcntl flags */
    int fd2 = dup(fd);
    CHECK(fd2 > fd);
    CHECK(lseek(fd2, 0, SEEK_SET) == 0 && lseek(fd, 0, SEEK_CUR) == 0);
    CHECK(read(fd, buf, 5) == 5 && lseek(fd2, 0, SEEK_CUR) == 5);
    CHECK(dup2(fd, 50) == 50 && dup3(fd, 51, O_CLOEXEC) == 51);
    CHECK(fcntl(51, F_GETFD) == FD_CLOEXEC && fcntl(50, F_GETFD) == 0);
    CHECK(fcntl(fd, F_DUPFD_CLOEXEC, 60) >= 60);
    CHECK(fcntl(fd, F_SETFL, O_APPEND) == 0 && (fcntl(fd2, F_GETFL) & O_APPEND));
    CHECK(write(fd2, "!", 1) == 1);
    CHECK(fcntl(fd, F_SETFL, 0) == 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == 12 && S_ISREG(st.st_mode));
    CHECK(stat("/augefs/c/f", &st) == 0 && st.st_size == 12);
    CHECK(fstatat(d, "f", &st, 0) == 0 && (st.st_mode & 0777) == 0644);
    struct statx sx;
    CHECK(statx(AT_FDCWD, "/augefs/c/f", 0, STATX_ALL, &sx) == 0 && sx.stx_size == 12);
    /* the kernel never sees augefs descriptors: none collides with a kernel one */
    int k = open("/dev/null", O_RDONLY);
    CHECK(k >= 0 && k != fd && k != fd2);
    close(k);
    /* locks */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4};
    CHECK(fcntl(fd, F_SETLK, &fl) == 0);
    fl.l_type = F_RDLCK;
    CHECK(fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type == F_UNLCK);
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0 && flock(fd, LOCK_UN) == 0);
    /* sizes, holes, allocation */
    CHECK(ftruncate(fd, 3) == 0 && fstat(fd, &st) == 0 && st.st_size == 3);
    CHECK(pwrite(fd, "x", 1, 3 * 4096) == 1);
    CHECK(lseek(fd, 4096, SEEK_DATA) == 3 * 4096);
    CHECK(lseek(fd, 0, SEEK_HOLE) == 4096);
    CHECK(posix_fallocate(fd, 0, 65536) == 0 && fstat(fd, &st) == 0 && st.st_size == 65536);
    CHECK(truncate("/augefs/c/f", 11) == 0);
    CHECK(fsync(fd) == 0 && fdatasync(fd) == 0);
    /* names */
    CHECK(rename("/augefs/c/f", "/augefs/c/g") == 0);
    CHECK(access("/augefs/c/f", F_OK) == -1 && errno == ENOENT);
    CHECK(link("/augefs/c/g", "/augefs/c/h") == 0);
    CHECK(symlink("g", "/augefs/c/s") == 0);
    ssize_t n = readlink("/augefs/c/s", buf, sizeof buf);
    CHECK(n == 1 && buf[0] == 'g');
    CHECK(lstat("/augefs/c/s", &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(renameat2(AT_FDCWD, "/augefs/c/h", AT_FDCWD, "/augefs/c/g", RENAME_NOREPLACE) == -1 &&
          errno == EEXIST);
    CHECK(rename("/augefs/c/g", "/tmp/augefs-never") == -1 && errno == EXDEV);
    CHECK(chmod("/augefs/c/g", 0600) == 0 && fchmod(fd, 0640) == 0);
    CHECK(stat("/augefs/c/g", &st) == 0 && (st.st_mode & 0777) == 0640);
    struct timespec ts[2] = {{1000, 0}, {2000, 5}};
    CHECK(utimensat(AT_FDCWD, "/augefs/c/g", ts, 0) == 0);
    CHECK(stat("/augefs/c/g", &st) == 0 && st.st_mtim.tv_sec == 2000 && st.st_mtim.tv_nsec == 5);
    CHECK(futimens(fd, NULL) == 0);
    CHECK(setxattr("/augefs/c/g", "user.k", "v", 1, 0) == 0);
    CHECK(getxattr("/augefs/c/g", "user.k", buf, sizeof buf) == 1 && buf[0] == 'v');
    CHECK(fgetxattr(fd, "user.none", buf, sizeof buf) == -1 && errno == ENODATA);
    struct statfs sfs;
    CHECK(statfs("/augefs", &sfs) == 0 && sfs.f_bsize == 4096);
    /* directories */
    DIR *dir = opendir("/augefs/c");
    CHECK(dir != NULL);
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) seen++;
    CHECK(seen == 5); /* . .. g h s */
    rewinddir(dir);
    CHECK(readdir(dir) != NULL && dirfd(dir) >= 0);
    CHECK(closedir(dir) == 0);
    CHECK(chdir("/augefs/c") == 0 && getcwd(buf, sizeof buf) && strcmp(buf, "/augefs/c") == 0);
    CHECK(access("g", R_OK) == 0);
    char *rp = realpath("s", NULL);
    CHECK(rp && strcmp(rp, "/augefs/c/s") == 0);
    free(rp);
    CHECK(chdir("/") == 0 && fchdir(d) == 0 && getcwd(buf, sizeof buf) && strcmp(buf, "/augefs/c") == 0);
    CHECK(chdir("/") == 0);
    /* stdio */
    FILE *f = fopen("/augefs/c/text", "w");
    CHECK(f != NULL);
    for (int i = 0; i < 1000; i++) fprintf(f, "line %d\n", i);
    CHECK(fclose(f) == 0);
    f = fopen("/augefs/c/text", "r");
    CHECK(f != NULL);
    int lines = 0;
    while (fgets(buf, sizeof buf, f)) lines++;
    CHECK(lines == 1000 && fclose(f) == 0);
    /* mmap: private and shared-writable */
    int m = open("/augefs/c/text", O_RDWR);
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    CHECK(p != MAP_FAILED && memcmp(p, "line 0\n", 7) == 0);
    memcpy(p, "LINE", 4);
    CHECK(msync(p, 4096, MS_SYNC) == 0 && munmap(p, 4096) == 0);
    CHECK(pread(m, buf, 4, 0) == 4 && memcmp(buf, "LINE", 4) == 0);
    /* copies between augefs and the kernel */
    int out = open("/augefs/c/copy", O_WRONLY | O_CREAT, 0644);
    off_t off = 0;
    CHECK(sendfile(out, m, &off, 100) == 100 && off == 100);
    CHECK(copy_file_range(m, NULL, out, NULL, 50, 0) == 50);
    CHECK(fstat(out, &st) == 0 && st.st_size == 150);
    /* preadv2 / pwritev2: offsets, RWF_APPEND, RWF_DSYNC, refused flags */
    int v2 = open("/augefs/c/v2", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(v2 >= 0);
    struct iovec w1[2] = {{"abc", 3}, {"def", 3}};
    CHECK(pwritev2(v2, w1, 2, -1, 0) == 6 && lseek(v2, 0, SEEK_CUR) == 6);
    struct iovec w2 = {"XY", 2};
    CHECK(pwritev2(v2, &w2, 1, 1, RWF_DSYNC) == 2 && lseek(v2, 0, SEEK_CUR) == 6);
    struct iovec w3 = {"end", 3};
    CHECK(pwritev2(v2, &w3, 1, 0, RWF_APPEND | RWF_SYNC) == 3);
    char r2[16] = {0};
    struct iovec rv = {r2, sizeof r2};
    CHECK(preadv2(v2, &rv, 1, 0, RWF_HIPRI) == 9 && memcmp(r2, "aXYdefend", 9) == 0);
    CHECK(lseek(v2, 2, SEEK_SET) == 2);
    memset(r2, 0, sizeof r2);
    CHECK(preadv2(v2, &rv, 1, -1, 0) == 7 && memcmp(r2, "Ydefend", 7) == 0);
    CHECK(lseek(v2, 0, SEEK_CUR) == 9);
    CHECK(preadv2(v2, &rv, 1, 0, RWF_NOWAIT) == -1 && errno == EOPNOTSUPP);
    CHECK(pwritev2(v2, &w2, 1, 0, 0x40000000) == -1 && errno == EOPNOTSUPP);
    CHECK(close(v2) == 0 && unlink("/augefs/c/v2") == 0);
    /* not a terminal; unsupported calls fail with ENOTSUP (and one log line) */
    CHECK(isatty(m) == 0 && errno == ENOTTY);
    int arg = 0;
    CHECK(ioctl(m, FIONREAD, &arg) == -1 && errno == ENOTSUP);
    CHECK(ioctl(m, FIONREAD, &arg) == -1 && errno == ENOTSUP);
    /* close: the number is free again, and a closed augefs descriptor is EBADF */
    CHECK(close(out) == 0 && write(out, "x", 1) == -1 && errno == EBADF);
    CHECK(unlink("/augefs/c/copy") == 0 && unlink("/augefs/c/s") == 0);
    CHECK(rmdir("/augefs/c") == -1 && errno == ENOTEMPTY);
    printf("calls ok\n");
    return 0;
}
