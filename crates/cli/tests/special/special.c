/* Special files on augefs: `special ROOT dev|nodev`. Under ROOT (a FUSE mount, or
 * /augefs through the interposer) it makes a FIFO (mkfifo), a socket (bind), a socket
 * node, a character and a block device node (mknod), checks what stat, statx and
 * readdir say of them, passes bytes through the FIFO and the socket between two
 * processes, opens the character device (1, 3: the kernel's null device) where the
 * mount allows devices ("dev") or expects EACCES ("nodev"), then renames, links,
 * chmods, chowns, sets the times of and removes each. Leaves sp/keep-fifo and
 * sp/keep-chr (1, 5) for the caller to find after a remount. Prints "special ok", or
 * names the failing line and errno. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "special.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                        \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static const char *root;

/* ROOT/sp/NAME in one of four rotating buffers (a call may take several paths). */
static const char *at(const char *name) {
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/sp/%s", root, name);
    return b;
}

static void type_and_rdev(const char *path, mode_t type, mode_t perm, dev_t rdev) {
    struct stat st;
    CHECK(lstat(path, &st) == 0);
    CHECK((st.st_mode & S_IFMT) == type);
    CHECK((st.st_mode & 07777) == perm);
    CHECK(st.st_rdev == rdev);
    CHECK(st.st_size == 0);
}

static unsigned char dtype_of(const char *name) {
    DIR *d = opendir(at(""));
    CHECK(d != NULL);
    struct dirent *e;
    unsigned char t = 0xff;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, name) == 0)
            t = e->d_type;
    closedir(d);
    return t;
}

static int unix_socket(const char *path, int listen_it) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(s >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    CHECK(strlen(path) < sizeof a.sun_path);
    strcpy(a.sun_path, path);
    if (listen_it) {
        CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
        CHECK(listen(s, 1) == 0);
    } else {
        CHECK(connect(s, (struct sockaddr *)&a, sizeof a) == 0);
    }
    return s;
}

/* A child writes `msg` into the FIFO; this process reads it back. */
static void through_fifo(const char *fifo, const char *msg) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(30);
        int w = open(fifo, O_WRONLY);
        if (w < 0 || write(w, msg, strlen(msg)) != (ssize_t)strlen(msg))
            _exit(2);
        close(w);
        _exit(0);
    }
    int r = open(fifo, O_RDONLY);
    CHECK(r >= 0);
    char buf[64] = {0};
    size_t got = 0;
    ssize_t n;
    while ((n = read(r, buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    CHECK(n == 0);
    close(r);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(strcmp(buf, msg) == 0);
}

/* A child connects to the listening socket and sends `msg`; this process receives it. */
static void through_socket(int listener, const char *path, const char *msg) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(30);
        int c = unix_socket(path, 0);
        if (write(c, msg, strlen(msg)) != (ssize_t)strlen(msg))
            _exit(2);
        close(c);
        _exit(0);
    }
    int c = accept(listener, NULL, NULL);
    CHECK(c >= 0);
    char buf[64] = {0};
    size_t got = 0;
    ssize_t n;
    while ((n = read(c, buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    close(c);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(strcmp(buf, msg) == 0);
}

/* rename, link, chmod, chown, utimensat and unlink of the node `name` (of `type`). */
static void names_and_attributes(const char *name, mode_t type, dev_t rdev) {
    char moved[256], linked[256];
    snprintf(moved, sizeof moved, "%s.moved", name);
    snprintf(linked, sizeof linked, "%s.link", name);
    CHECK(rename(at(name), at(moved)) == 0);
    CHECK(access(at(name), F_OK) == -1 && errno == ENOENT);
    CHECK(link(at(moved), at(linked)) == 0);
    struct stat a, b;
    CHECK(lstat(at(moved), &a) == 0 && lstat(at(linked), &b) == 0);
    CHECK(a.st_ino == b.st_ino && a.st_nlink == 2 && b.st_nlink == 2);
    CHECK(chmod(at(linked), 0604) == 0);
    CHECK(chown(at(moved), 4321, 8765) == 0);
    struct timespec times[2] = {{100, 5}, {200, 7}};
    CHECK(utimensat(AT_FDCWD, at(linked), times, AT_SYMLINK_NOFOLLOW) == 0);
    type_and_rdev(at(moved), type, 0604, rdev);
    CHECK(lstat(at(moved), &a) == 0);
    CHECK(a.st_uid == 4321 && a.st_gid == 8765);
    CHECK(a.st_atim.tv_sec == 100 && a.st_mtim.tv_sec == 200 && a.st_mtim.tv_nsec == 7);
    CHECK(unlink(at(moved)) == 0);
    CHECK(lstat(at(linked), &b) == 0 && b.st_nlink == 1);
    CHECK(unlink(at(linked)) == 0);
    CHECK(lstat(at(linked), &b) == -1 && errno == ENOENT);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    root = argv[1];
    alarm(60); /* a FIFO or socket that never connects fails the test, not hangs it */
    int devices = strcmp(argv[2], "dev") == 0;
    umask(0);
    CHECK(mkdir(at(""), 0755) == 0);

    CHECK(mkfifo(at("fifo"), 0640) == 0);
    CHECK(mkfifo(at("fifo"), 0640) == -1 && errno == EEXIST);
    CHECK(mknod(at("chr"), S_IFCHR | 0666, makedev(1, 3)) == 0);
    CHECK(mknod(at("blk"), S_IFBLK | 0600, makedev(8, 300)) == 0);
    CHECK(mknod(at("sockn"), S_IFSOCK | 0600, 0) == 0);
    CHECK(mknod(at("reg"), S_IFREG | 0600, 0) == 0);
    int listener = unix_socket(at("sock"), 1);

    type_and_rdev(at("fifo"), S_IFIFO, 0640, 0);
    type_and_rdev(at("chr"), S_IFCHR, 0666, makedev(1, 3));
    type_and_rdev(at("blk"), S_IFBLK, 0600, makedev(8, 300));
    type_and_rdev(at("sockn"), S_IFSOCK, 0600, 0);
    type_and_rdev(at("reg"), S_IFREG, 0600, 0);
    struct stat st;
    CHECK(lstat(at("sock"), &st) == 0 && S_ISSOCK(st.st_mode));
    struct statx sx;
    CHECK(statx(AT_FDCWD, at("blk"), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) == 0);
    CHECK(sx.stx_rdev_major == 8 && sx.stx_rdev_minor == 300);
    CHECK((sx.stx_mode & S_IFMT) == S_IFBLK);
    CHECK(dtype_of("fifo") == DT_FIFO);
    CHECK(dtype_of("chr") == DT_CHR);
    CHECK(dtype_of("blk") == DT_BLK);
    CHECK(dtype_of("sock") == DT_SOCK);
    CHECK(dtype_of("reg") == DT_REG);

    /* The kernel provides the pipe, the socket and the device. */
    through_fifo(at("fifo"), "through the fifo");
    through_socket(listener, at("sock"), "through the socket");
    int fd = open(at("chr"), O_RDWR);
    if (devices) {
        CHECK(fd >= 0);
        char buf[8];
        CHECK(write(fd, "gone", 4) == 4);
        CHECK(read(fd, buf, sizeof buf) == 0);
        close(fd);
    } else {
        CHECK(fd == -1 && errno == EACCES);
    }
    CHECK(truncate(at("fifo"), 0) == -1 && errno == EINVAL);

    names_and_attributes("fifo", S_IFIFO, 0);
    names_and_attributes("chr", S_IFCHR, makedev(1, 3));
    names_and_attributes("blk", S_IFBLK, makedev(8, 300));
    names_and_attributes("sockn", S_IFSOCK, 0);
    close(listener);
    names_and_attributes("sock", S_IFSOCK, 0);
    CHECK(unlink(at("reg")) == 0);

    CHECK(mkfifo(at("keep-fifo"), 0600) == 0);
    CHECK(mknod(at("keep-chr"), S_IFCHR | 0644, makedev(1, 5)) == 0);
    printf("special ok\n");
    return 0;
}
