"""Run as the owner under `augefs run` (it calls the vfs directly) against its own
children, which reach the same file system through the bridge: `owner_locks.py DIR
LOCKS_PY`. The owner holds flock and fcntl locks that a child conflicts with, and a
child holds locks the owner conflicts with, as two processes on ext4 would. (A flock
the owner takes *before* it starts a child is lost when its descriptors move to the
bridge for the fork: docs/SEMANTICS.md §4.)
"""
import errno
import fcntl
import os
import sys

sys.argv = [sys.argv[2], sys.argv[1], "main"]
D = sys.argv[1]
exec(open(sys.argv[0]).read().split('if __name__ == "__main__":')[0])
ME = os.path.abspath(sys.argv[0])

# The owner's classic lock (a process's) is the one a child meets.
fd = open_rw("o")
assert setlk(fd, fcntl.F_WRLCK, 0, 100) == 0
t = spawn("try-fcntl", "o")
typ, start, length, pid = line(t).split()
assert int(typ) == fcntl.F_WRLCK and int(pid) == os.getpid(), (typ, pid, os.getpid())
assert line(t) == "EAGAIN", "a child's F_SETLK on the owner's range"
w = spawn("wait-fcntl", "o")
assert line(w) == "trying"
assert still_waiting(w), "a child's F_SETLKW returned while the owner held the range"
# Spawning converted fd to a bridge descriptor: the owner unlocks through the posix
# layer's table by its pid on a fresh descriptor.
fresh = open_rw("o")
assert setlk(fresh, fcntl.F_UNLCK, 0, 100) == 0
assert line(w) == "got"
assert w.wait(timeout=30) == 0

# A child's locks are the ones the owner meets.
h = spawn("hold-fcntl", "p")
assert line(h) == "held"
fd2 = open_rw("p")
assert setlk(fd2, fcntl.F_WRLCK, 10, 1) == errno.EAGAIN, "the owner against a child's lock"
assert getlk(fd2, fcntl.F_WRLCK, 0, 1)[3] == h.pid
release(h)
assert setlk(fd2, fcntl.F_WRLCK, 10, 1) == 0
assert setlk(fd2, fcntl.F_UNLCK, 10, 1) == 0
fd3 = open_rw("q")
g = spawn("hold-flock", "q")
assert line(g) == "held"
try:
    fcntl.flock(fd3, fcntl.LOCK_EX | fcntl.LOCK_NB)
    raise AssertionError("the owner took a flock a child holds")
except BlockingIOError:
    pass
release(g)
fcntl.flock(fd3, fcntl.LOCK_EX | fcntl.LOCK_NB)
# ... and the owner's flock, taken after the spawn, is the one a child meets.
t = spawn("try-flock", "q")
assert line(t) == "EWOULDBLOCK", "a child's LOCK_NB while the owner holds LOCK_EX"
print("all ok")
