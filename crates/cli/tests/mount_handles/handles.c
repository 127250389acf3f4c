/* File handles on an augefs mount (FUSE_EXPORT_SUPPORT): name_to_handle_at, then
 * open_by_handle_at, also in a later mount of the same image.
 *
 *   handles save DIR FILE   handles of DIR/f, DIR/d, DIR/d/e, DIR/d/e/g, DIR/gone into FILE
 *   handles open DIR FILE   opens each handle through DIR; checks what it opened
 *
 * `open` expects DIR/gone to have been removed since `save` (its handle must be
 * stale) and the rest unchanged: f holds "file f\n", g holds "file g\n", d and e are
 * directories (e found by name in d, g by name in e). Prints "handles ok" and exits 0,
 * or names the failing check and errno. Needs CAP_DAC_READ_SEARCH (root). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAMES 5
static const char *names[NAMES] = {"f", "d", "d/e", "d/e/g", "gone"};

#define CHECK(cond, what)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "handles: %s (line %d): %s\n", what, __LINE__, strerror(errno)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

struct saved {
    unsigned int bytes;
    int type;
    unsigned char f_handle[MAX_HANDLE_SZ];
};

static void save(const char *dir, const char *file) {
    FILE *out = fopen(file, "wb");
    CHECK(out, "open the handle file");
    for (int i = 0; i < NAMES; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct file_handle *fh = malloc(sizeof *fh + MAX_HANDLE_SZ);
        CHECK(fh, "malloc");
        fh->handle_bytes = MAX_HANDLE_SZ;
        int mount_id;
        CHECK(name_to_handle_at(AT_FDCWD, path, fh, &mount_id, 0) == 0, path);
        struct saved s = {.bytes = fh->handle_bytes, .type = fh->handle_type};
        CHECK(fh->handle_bytes <= MAX_HANDLE_SZ, "handle size");
        memcpy(s.f_handle, fh->f_handle, fh->handle_bytes);
        CHECK(fwrite(&s, sizeof s, 1, out) == 1, "write a handle");
        free(fh);
    }
    CHECK(fclose(out) == 0, "close the handle file");
}

static int open_saved(int mount_fd, const struct saved *s, int flags) {
    struct file_handle *fh = malloc(sizeof *fh + MAX_HANDLE_SZ);
    CHECK(fh, "malloc");
    fh->handle_bytes = s->bytes;
    fh->handle_type = s->type;
    memcpy(fh->f_handle, s->f_handle, s->bytes);
    int fd = open_by_handle_at(mount_fd, fh, flags);
    int saved_errno = errno;
    free(fh);
    errno = saved_errno;
    return fd;
}

static void expect_content(int fd, const char *want, const char *what) {
    char buf[64] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(n == (ssize_t)strlen(want) && memcmp(buf, want, n) == 0, what);
}

static void expect_dir(int fd, const char *child, const char *what) {
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && S_ISDIR(st.st_mode), what);
    CHECK(fstatat(fd, child, &st, AT_SYMLINK_NOFOLLOW) == 0, what);
}

static void open_all(const char *dir, const char *file) {
    FILE *in = fopen(file, "rb");
    CHECK(in, "open the handle file");
    struct saved s[NAMES];
    CHECK(fread(s, sizeof s[0], NAMES, in) == NAMES, "read the handles");
    fclose(in);
    int mount_fd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(mount_fd >= 0, "open the mount");

    int fd = open_saved(mount_fd, &s[0], O_RDONLY);
    CHECK(fd >= 0, "open_by_handle_at f");
    expect_content(fd, "file f\n", "f's content");
    close(fd);
    fd = open_saved(mount_fd, &s[1], O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0, "open_by_handle_at d");
    expect_dir(fd, "e", "d is a directory holding e");
    close(fd);
    /* A directory's handle must come back connected: the kernel walks up with
     * lookups of ".." to the root. */
    fd = open_saved(mount_fd, &s[2], O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0, "open_by_handle_at d/e");
    expect_dir(fd, "g", "d/e is a directory holding g");
    close(fd);
    fd = open_saved(mount_fd, &s[3], O_RDWR);
    CHECK(fd >= 0, "open_by_handle_at d/e/g");
    expect_content(fd, "file g\n", "g's content");
    close(fd);
    fd = open_saved(mount_fd, &s[4], O_RDONLY);
    CHECK(fd < 0 && errno == ESTALE, "a removed file's handle is stale");
    close(mount_fd);
    printf("handles ok\n");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: handles save|open DIR FILE\n");
        return 2;
    }
    if (strcmp(argv[1], "save") == 0) {
        save(argv[2], argv[3]);
        printf("saved\n");
    } else if (strcmp(argv[1], "open") == 0) {
        open_all(argv[2], argv[3]);
    } else {
        return 2;
    }
    return 0;
}
