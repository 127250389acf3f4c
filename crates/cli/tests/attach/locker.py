# Attached process A: writes a file, takes a record lock and a flock on it, says so,
# and holds them until told to let go (a file appears), then writes more.
import fcntl, os, sys, time
mnt, host = sys.argv[1], sys.argv[2]
fd = os.open(mnt + "/shared", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"from A\n")
fcntl.lockf(fd, fcntl.LOCK_EX)
lk = os.open(mnt + "/shared", os.O_RDONLY)
fcntl.flock(lk, fcntl.LOCK_SH)
open(host + "/a-locked", "w").close()
while not os.path.exists(host + "/a-release"):
    time.sleep(0.01)
fcntl.lockf(fd, fcntl.LOCK_UN)
os.close(lk)
os.write(fd, b"A again\n")
os.close(fd)
