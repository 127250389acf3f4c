/* augefs C ABI (libaugefs.so, crates/capi). Every call returns a negative errno on
 * failure; paths are inside the image ("/" is its root). Link with
 * `pkg-config --cflags --libs augefs`. */
#ifndef AUGEFS_H
#define AUGEFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Augefs augefs_t;

/* A zero-copy read's view: bytes of the file as they were at one moment of the
 * read, lent from the page cache's own 4 KiB blocks. They never change and stay
 * valid until the view is released, whatever happens to the file meanwhile
 * (writes, truncate, unlink, unmount); each view holds its blocks' memory. */
typedef struct AugefsView augefs_view_t;

augefs_t *augefs_mount(const char *image, const char *pmr, int *err);
int augefs_unmount(augefs_t *h);
int augefs_open(augefs_t *h, const char *path, int flags, uint32_t mode);
int augefs_close(augefs_t *h, int fd);
ssize_t augefs_read(augefs_t *h, int fd, void *buf, size_t n);
ssize_t augefs_write(augefs_t *h, int fd, const void *buf, size_t n);
ssize_t augefs_pread(augefs_t *h, int fd, void *buf, size_t n, int64_t off);
ssize_t augefs_pwrite(augefs_t *h, int fd, const void *buf, size_t n, int64_t off);
/* pread without a copy: *view lends up to n bytes at off; returns the bytes lent
 * (0 at the end) or a negative errno with *view NULL. Release every view. */
ssize_t augefs_pread_view(augefs_t *h, int fd, size_t n, int64_t off, augefs_view_t **view);
/* The view's bytes as iovecs in order; returns their count. */
int augefs_view_iov(const augefs_view_t *view, const struct iovec **iov);
void augefs_view_release(augefs_view_t *view);
int64_t augefs_lseek(augefs_t *h, int fd, int64_t off, int whence);
int augefs_fsync(augefs_t *h, int fd);
int augefs_stat(augefs_t *h, const char *path, struct stat *out);
int augefs_mkdir(augefs_t *h, const char *path, uint32_t mode);
int augefs_unlink(augefs_t *h, const char *path);
int augefs_rmdir(augefs_t *h, const char *path);
int augefs_rename(augefs_t *h, const char *from, const char *to);
int augefs_readdir(augefs_t *h, int fd, char *name, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* AUGEFS_H */
