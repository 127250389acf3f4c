/* NFS file handles held across a change on the server (scripts/cluster nfs): a libnfs
 * client mounts SERVER:EXPORT, opens each FILE (its NFSv3 handle, kept in the nfsfh),
 * reads it whole, prints "opened N" and waits for a line on standard input (the
 * server's file system is remounted meanwhile); then it reads every file again by the
 * handle it holds (no new LOOKUP) and compares the bytes. Prints "handles ok N" and
 * exits 0, or names the first file that failed and exits 1.
 *
 *   nfs_handles SERVER EXPORT FILE...     (FILE: a path inside the export)
 */
#include <fcntl.h>
#include <inttypes.h>
#include <sys/time.h> /* libnfs.h uses struct timeval without including it */
#include <nfsc/libnfs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct held {
    const char *path;
    struct nfsfh *fh;
    char *bytes;
    uint64_t size;
};

/* Reads the whole file behind fh (size bytes) into a new buffer, or NULL. */
static char *read_all(struct nfs_context *nfs, struct nfsfh *fh, uint64_t size) {
    char *b = malloc(size + 1);
    uint64_t off = 0;
    while (b != NULL && off < size) {
        int n = nfs_pread(nfs, fh, off, size - off, b + off);
        if (n <= 0) {
            free(b);
            return NULL;
        }
        off += (uint64_t)n;
    }
    return b;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: nfs_handles SERVER EXPORT FILE...\n");
        return 2;
    }
    struct nfs_context *nfs = nfs_init_context();
    if (nfs == NULL || nfs_mount(nfs, argv[1], argv[2]) != 0) {
        fprintf(stderr, "mount %s:%s: %s\n", argv[1], argv[2], nfs ? nfs_get_error(nfs) : "no context");
        return 1;
    }
    int count = argc - 3;
    struct held *h = calloc((size_t)count, sizeof *h);
    for (int i = 0; i < count; i++) {
        struct nfs_stat_64 st;
        h[i].path = argv[i + 3];
        if (nfs_open(nfs, h[i].path, O_RDONLY, &h[i].fh) != 0 || nfs_fstat64(nfs, h[i].fh, &st) != 0) {
            fprintf(stderr, "open %s: %s\n", h[i].path, nfs_get_error(nfs));
            return 1;
        }
        h[i].size = st.nfs_size;
        h[i].bytes = read_all(nfs, h[i].fh, h[i].size);
        if (h[i].bytes == NULL) {
            fprintf(stderr, "read %s: %s\n", h[i].path, nfs_get_error(nfs));
            return 1;
        }
    }
    printf("opened %d\n", count);
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) {
        fprintf(stderr, "no go-ahead on standard input\n");
        return 1;
    }
    for (int i = 0; i < count; i++) {
        struct nfs_stat_64 st;
        if (nfs_fstat64(nfs, h[i].fh, &st) != 0) {
            fprintf(stderr, "getattr of %s by its old handle: %s\n", h[i].path, nfs_get_error(nfs));
            return 1;
        }
        char *again = st.nfs_size == h[i].size ? read_all(nfs, h[i].fh, h[i].size) : NULL;
        if (again == NULL || memcmp(again, h[i].bytes, h[i].size) != 0) {
            fprintf(stderr, "%s read by its old handle differs (size %" PRIu64 ", was %" PRIu64 "): %s\n",
                    h[i].path, (uint64_t)st.nfs_size, h[i].size, nfs_get_error(nfs));
            return 1;
        }
        free(again);
    }
    printf("handles ok %d\n", count);
    return 0;
}
