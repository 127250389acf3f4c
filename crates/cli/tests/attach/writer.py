# Writes files under the mount, printing each name once its write returned (not
# fsync'd: an unmount must make what was acknowledged durable), until a call fails;
# then prints the errno it failed with.
import os, sys
mnt = sys.argv[1]
i = 0
try:
    while True:
        with open("%s/w%06d" % (mnt, i), "wb") as f:
            f.write((("%06d" % i) * 1000).encode())
        print(i, flush=True)
        i += 1
except OSError as e:
    print("failed", e.errno, flush=True)
