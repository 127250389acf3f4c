/* POSIX asynchronous IO on a file in augefs (argv[1], a directory) and, in one list, on
 * a host file (argv[2]): aio_write, aio_read, aio_fsync, aio_suspend, aio_cancel and
 * lio_listio, with each kind of notification (none, a signal, a thread), and an error
 * reported through aio_error. glibc runs aio on threads of its own whose inner pread
 * and pwrite no interposer sees. Prints "aio ok" and exits 0, or names the failing line
 * and errno. */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c)                                                                \
    do {                                                                        \
        if (!(c)) {                                                             \
            fprintf(stderr, "aio.c:%d: %s failed (errno %d: %s)\n", __LINE__, #c, \
                    errno, strerror(errno));                                    \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static volatile sig_atomic_t signalled;
static volatile int thread_value;

static void on_signal(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    if (sig == SIGUSR1 && info->si_value.sival_int == 7) signalled = 1;
}

static void on_thread(union sigval v) { thread_value = v.sival_int; }

/* Waits up to 10 s for the request to leave EINPROGRESS; its aio_error. */
static int wait_done(struct aiocb *cb) {
    for (int i = 0; i < 10000; i++) {
        int e = aio_error(cb);
        if (e != EINPROGRESS) return e;
        usleep(1000);
    }
    return EINPROGRESS;
}

static void wait_flag(volatile sig_atomic_t *f) {
    for (int i = 0; i < 10000 && !*f; i++) usleep(1000);
    CHECK(*f);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    char path[4096], host[4096];
    snprintf(path, sizeof path, "%s/aio-file", argv[1]);
    snprintf(host, sizeof host, "%s", argv[2]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    static char out[8192], in[8192];
    for (size_t i = 0; i < sizeof out; i++) out[i] = (char)(i * 31 + 5);

    /* aio_write with no notification; glibc's aio_error and aio_return. */
    struct aiocb w = {0};
    w.aio_fildes = fd;
    w.aio_buf = out;
    w.aio_nbytes = 4096;
    w.aio_offset = 0;
    w.aio_sigevent.sigev_notify = SIGEV_NONE;
    CHECK(aio_write(&w) == 0);
    CHECK(wait_done(&w) == 0);
    CHECK(aio_return(&w) == 4096);
    const struct aiocb *one[1] = {&w};
    struct timespec second = {1, 0};
    CHECK(aio_suspend(one, 1, &second) == 0);

    /* aio_read, notified by a queued signal. */
    struct sigaction sa = {0};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    struct aiocb r = {0};
    r.aio_fildes = fd;
    r.aio_buf = in;
    r.aio_nbytes = 4096;
    r.aio_offset = 0;
    r.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
    r.aio_sigevent.sigev_signo = SIGUSR1;
    r.aio_sigevent.sigev_value.sival_int = 7;
    CHECK(aio_read(&r) == 0);
    CHECK(wait_done(&r) == 0);
    CHECK(aio_return(&r) == 4096 && memcmp(in, out, 4096) == 0);
    wait_flag(&signalled);

    /* aio_fsync, notified on a thread. */
    struct aiocb s = {0};
    s.aio_fildes = fd;
    s.aio_sigevent.sigev_notify = SIGEV_THREAD;
    s.aio_sigevent.sigev_notify_function = on_thread;
    s.aio_sigevent.sigev_value.sival_int = 42;
    CHECK(aio_fsync(O_SYNC, &s) == 0);
    CHECK(wait_done(&s) == 0 && aio_return(&s) == 0);
    for (int i = 0; i < 10000 && thread_value != 42; i++) usleep(1000);
    CHECK(thread_value == 42);

    /* A read past the end reads nothing; a cancel finds the request done. */
    struct aiocb e = {0};
    e.aio_fildes = fd;
    e.aio_buf = in;
    e.aio_nbytes = 100;
    e.aio_offset = 1 << 20;
    CHECK(aio_read(&e) == 0 && wait_done(&e) == 0 && aio_return(&e) == 0);
    CHECK(aio_cancel(fd, &e) == AIO_ALLDONE);

    /* An error is the request's, reported by aio_error: writing a read-only handle. */
    int ro = open(path, O_RDONLY);
    CHECK(ro >= 0);
    struct aiocb bad = {0};
    bad.aio_fildes = ro;
    bad.aio_buf = out;
    bad.aio_nbytes = 10;
    CHECK(aio_write(&bad) == 0);
    CHECK(wait_done(&bad) == EBADF && aio_return(&bad) == -1);

    /* lio_listio, waiting, of two augefs writes and one to a host file. */
    int hfd = open(host, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(hfd >= 0);
    struct aiocb l1 = {0}, l2 = {0}, l3 = {0};
    l1.aio_fildes = fd, l1.aio_lio_opcode = LIO_WRITE, l1.aio_buf = out + 4096;
    l1.aio_nbytes = 4096, l1.aio_offset = 4096;
    l2.aio_fildes = fd, l2.aio_lio_opcode = LIO_WRITE, l2.aio_buf = out;
    l2.aio_nbytes = 100, l2.aio_offset = 8192;
    l3.aio_fildes = hfd, l3.aio_lio_opcode = LIO_WRITE, l3.aio_buf = out;
    l3.aio_nbytes = 3000, l3.aio_offset = 0;
    struct aiocb *list[4] = {&l1, NULL, &l2, &l3};
    CHECK(lio_listio(LIO_WAIT, list, 4, NULL) == 0);
    CHECK(aio_return(&l1) == 4096 && aio_return(&l2) == 100 && aio_return(&l3) == 3000);
    CHECK(pread(fd, in, 8192, 0) == 8192 && memcmp(in, out, 8192) == 0);
    CHECK(pread(fd, in, 200, 8192) == 100 && memcmp(in, out, 100) == 0);
    CHECK(pread(hfd, in, 4000, 0) == 3000 && memcmp(in, out, 3000) == 0);

    /* A waiting list with a failed request fails with EIO; the others complete. */
    struct aiocb f1 = {0}, f2 = {0};
    f1.aio_fildes = ro, f1.aio_lio_opcode = LIO_WRITE, f1.aio_buf = out, f1.aio_nbytes = 10;
    f2.aio_fildes = hfd, f2.aio_lio_opcode = LIO_WRITE, f2.aio_buf = out;
    f2.aio_nbytes = 10, f2.aio_offset = 3000;
    struct aiocb *flist[2] = {&f1, &f2};
    errno = 0;
    CHECK(lio_listio(LIO_WAIT, flist, 2, NULL) == -1 && errno == EIO);
    CHECK(aio_error(&f1) == EBADF && aio_error(&f2) == 0 && aio_return(&f2) == 10);

    /* lio_listio without waiting, its list notified by a signal. */
    signalled = 0;
    struct aiocb l4 = {0};
    l4.aio_fildes = fd, l4.aio_lio_opcode = LIO_READ, l4.aio_buf = in;
    l4.aio_nbytes = 4096, l4.aio_offset = 4096;
    struct aiocb *list2[1] = {&l4};
    struct sigevent ev = {0};
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGUSR1;
    ev.sigev_value.sival_int = 7;
    CHECK(lio_listio(LIO_NOWAIT, list2, 1, &ev) == 0);
    CHECK(wait_done(&l4) == 0 && aio_return(&l4) == 4096);
    CHECK(memcmp(in, out + 4096, 4096) == 0);
    wait_flag(&signalled);

    CHECK(close(fd) == 0 && close(ro) == 0 && close(hfd) == 0);
    printf("aio ok\n");
    return 0;
}
