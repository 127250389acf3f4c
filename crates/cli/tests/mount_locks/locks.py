"""Locks between processes on one augefs file system, as on ext4.

`locks.py DIR main` runs every check on files in DIR: flock (a held LOCK_EX makes
another process's LOCK_EX|LOCK_NB fail with EWOULDBLOCK and a blocking one wait until
the holder lets go), fcntl record locks (F_SETLK conflicts, F_GETLK names the holder's
pid, any close by the holder drops its locks), OFD locks (per open file description,
dropped at its last close), a holder killed with SIGKILL releases everything, and an
F_SETLKW waiter killed with a signal goes away. The other arguments are the roles of
the helper processes it starts. Prints "all ok" at the end; any failure raises.
"""
import errno
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import time

D = sys.argv[1]
ME = os.path.abspath(__file__)
F_OFD_GETLK, F_OFD_SETLK = 36, 37


def lk(typ, start, length):
    return struct.pack("hhqqi4x", typ, os.SEEK_SET, start, length, 0)


def unlk(b):
    typ, _, start, length, pid = struct.unpack("hhqqi4x", b)
    return typ, start, length, pid


def setlk(fd, typ, start, length, cmd=fcntl.F_SETLK):
    """0, or the errno of a refused lock."""
    try:
        fcntl.fcntl(fd, cmd, lk(typ, start, length))
        return 0
    except OSError as e:
        return e.errno


def getlk(fd, typ, start, length, cmd=fcntl.F_GETLK):
    return unlk(fcntl.fcntl(fd, cmd, lk(typ, start, length)))


def open_rw(name):
    return os.open(os.path.join(D, name), os.O_RDWR | os.O_CREAT, 0o644)


def spawn(*args):
    return subprocess.Popen([sys.executable, ME, D, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def line(p, timeout=30):
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    assert ready, f"no line from {p.args} within {timeout} s"
    return p.stdout.readline().strip()


def release(p):
    p.stdin.write("\n")
    p.stdin.flush()
    assert p.wait(timeout=30) == 0


def still_waiting(p, seconds=0.7):
    time.sleep(seconds)
    return p.poll() is None


# Roles of helper processes.
def role(name, f):
    fd = open_rw(f)
    if name == "hold-flock":
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        sys.stdin.readline()
    elif name == "try-flock":
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print("ok", flush=True)
        except OSError as e:
            # EWOULDBLOCK and EAGAIN are one number on Linux.
            print("EWOULDBLOCK" if e.errno == errno.EWOULDBLOCK else e, flush=True)
    elif name == "wait-flock":
        print("trying", flush=True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("got", flush=True)
    elif name == "hold-fcntl":
        assert setlk(fd, fcntl.F_WRLCK, 0, 100) == 0
        print("held", flush=True)
        sys.stdin.readline()
    elif name == "try-fcntl":
        typ, start, length, pid = getlk(fd, fcntl.F_WRLCK, 0, 10)
        print(typ, start, length, pid, flush=True)
        print(errno.errorcode.get(setlk(fd, fcntl.F_WRLCK, 50, 10), "ok"), flush=True)
    elif name == "lock-then-close-another":
        assert setlk(fd, fcntl.F_WRLCK, 0, 100) == 0
        other = open_rw(f)
        print("locked", flush=True)
        sys.stdin.readline()
        os.close(other)  # POSIX: any close of the file drops the process's locks
        print("closed", flush=True)
        sys.stdin.readline()
    elif name == "hold-both":
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert setlk(fd, fcntl.F_WRLCK, 0, 0) == 0
        print("held", flush=True)
        time.sleep(3600)
    elif name == "wait-fcntl":
        print("trying", flush=True)
        setlk(fd, fcntl.F_WRLCK, 0, 100, fcntl.F_SETLKW)
        print("got", flush=True)
    else:
        raise SystemExit(f"unknown role {name}")


def check_flock():
    h = spawn("hold-flock", "a")
    assert line(h) == "held"
    t = spawn("try-flock", "a")
    assert line(t) == "EWOULDBLOCK", "LOCK_NB while another process holds LOCK_EX"
    w = spawn("wait-flock", "a")
    assert line(w) == "trying"
    assert still_waiting(w), "a blocking flock returned while the lock was held"
    release(h)
    assert line(w) == "got", "the waiter gets the lock once the holder lets go"
    assert w.wait(timeout=30) == 0


def check_fcntl():
    h = spawn("hold-fcntl", "b")
    assert line(h) == "held"
    t = spawn("try-fcntl", "b")
    typ, start, length, pid = line(t).split()
    assert (int(typ), int(start), int(length)) == (fcntl.F_WRLCK, 0, 100), (typ, start, length)
    assert int(pid) == h.pid, f"F_GETLK names pid {pid}, the holder is {h.pid}"
    assert line(t) == "EAGAIN", "F_SETLK on a range another process holds"
    release(h)
    t = spawn("try-fcntl", "b")
    assert int(line(t).split()[0]) == fcntl.F_UNLCK
    assert line(t) == "ok"
    # Any close by the holder drops its locks, even of another descriptor.
    c = spawn("lock-then-close-another", "c")
    assert line(c) == "locked"
    fd = open_rw("c")
    assert setlk(fd, fcntl.F_WRLCK, 0, 100) == errno.EAGAIN
    c.stdin.write("\n")
    c.stdin.flush()
    assert line(c) == "closed"
    assert setlk(fd, fcntl.F_WRLCK, 0, 100) == 0, "the holder's close released its lock"
    assert setlk(fd, fcntl.F_UNLCK, 0, 100) == 0
    release(c)
    os.close(fd)


def check_ofd():
    a, b = open_rw("d"), open_rw("d")
    assert setlk(a, fcntl.F_WRLCK, 0, 10, F_OFD_SETLK) == 0
    assert setlk(b, fcntl.F_WRLCK, 5, 10, F_OFD_SETLK) == errno.EAGAIN, \
        "OFD locks of two descriptions of one process conflict"
    assert getlk(b, fcntl.F_WRLCK, 0, 1, F_OFD_GETLK)[0] == fcntl.F_WRLCK
    os.close(a)  # the description's last close drops its OFD locks
    # ... at the RELEASE the kernel sends after it, asynchronously (the kernel keeps no
    # record of a FUSE file's OFD locks, so close itself sends no unlock): under load
    # the next F_OFD_SETLK can come first, and sees EAGAIN for a moment.
    deadline = time.monotonic() + 5
    while (got := setlk(b, fcntl.F_WRLCK, 5, 10, F_OFD_SETLK)) == errno.EAGAIN:
        assert time.monotonic() < deadline, "the last close never dropped the OFD lock"
        time.sleep(0.01)
    assert got == 0, f"F_OFD_SETLK after the holder's close: errno {got}"
    os.close(b)


def check_killed_holder():
    k = spawn("hold-both", "e")
    assert line(k) == "held"
    fd = open_rw("e")
    assert setlk(fd, fcntl.F_WRLCK, 0, 1) == errno.EAGAIN
    os.kill(k.pid, signal.SIGKILL)
    k.wait(timeout=30)
    deadline = time.time() + 20
    while setlk(fd, fcntl.F_WRLCK, 0, 1) != 0:
        assert time.time() < deadline, "a killed holder's record lock stayed"
        time.sleep(0.05)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if its flock stayed
    os.close(fd)


def check_killed_waiter():
    fd = open_rw("f")
    assert setlk(fd, fcntl.F_WRLCK, 0, 100) == 0
    for sig in (signal.SIGKILL, signal.SIGTERM):
        w = spawn("wait-fcntl", "f")
        assert line(w) == "trying"
        assert still_waiting(w), "F_SETLKW returned while the range was held"
        os.kill(w.pid, sig)
        try:
            w.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"an F_SETLKW waiter did not die of signal {sig}")
    # Nothing of the dead waiters stays: another process locks the range once it is free.
    assert setlk(fd, fcntl.F_UNLCK, 0, 100) == 0
    t = spawn("try-fcntl", "f")
    assert int(line(t).split()[0]) == fcntl.F_UNLCK
    assert line(t) == "ok"
    os.close(fd)


if __name__ == "__main__":
    if sys.argv[2] != "main":
        role(sys.argv[2], sys.argv[3])
        sys.exit(0)
    checks = sys.argv[3:] or ["flock", "fcntl", "ofd", "killed_holder", "killed_waiter"]
    for c in checks:
        globals()["check_" + c]()
        print(c, "ok", flush=True)
    print("all ok")
