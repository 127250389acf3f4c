# Attached process B: finds A's data and locks, asks A to let go, then takes the locks
# itself (waiting), and checks what A wrote after.
import errno, fcntl, os, sys, time
mnt, host = sys.argv[1], sys.argv[2]
fd = os.open(mnt + "/shared", os.O_RDWR)
assert os.read(fd, 100) == b"from A\n"
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    sys.exit("B got the record lock A holds")
except OSError as e:
    assert e.errno in (errno.EAGAIN, errno.EACCES), e
lk = os.open(mnt + "/shared", os.O_RDONLY)
try:
    fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
    sys.exit("B got the flock A shares")
except OSError as e:
    assert e.errno == errno.EWOULDBLOCK, e
open(host + "/a-release", "w").close()
fcntl.lockf(fd, fcntl.LOCK_EX)
fcntl.flock(lk, fcntl.LOCK_EX)
while os.fstat(fd).st_size < 15:
    time.sleep(0.01)
assert os.pread(fd, 100, 0) == b"from A\nA again\n", os.pread(fd, 100, 0)
print("B ok")
