# Creates, writes and fsyncs files, printing each name once its fsync returned: an
# acknowledged file must survive this process being killed at any moment.
import os, sys
mnt = sys.argv[1]
i = 0
while True:
    name = "%s/k%06d" % (mnt, i)
    fd = os.open(name + ".tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, (("%06d" % i) * 700).encode())
    os.fsync(fd)
    os.close(fd)
    os.rename(name + ".tmp", name)
    d = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(d)
    os.close(d)
    print(i, flush=True)
    i += 1
