# An attached process whose working directory is the mount's parent: relative paths
# into the mount ("mnt/d/f", a directory opened relative and used with *at calls, a
# chdir into it) are served directly, and paths that leave the mount again through
# ".." reach the host as the kernel resolves them.
# argv: the mount's name (relative to the working directory), a host file's name.
import os, sys
mnt, host_file = sys.argv[1], sys.argv[2]


def served(fd, what):
    # An augefs descriptor's number is held by a placeholder of /dev/null.
    target = os.readlink("/proc/self/fd/%d" % fd)
    if target != "/dev/null":
        sys.exit("%s: through the kernel (%s), not served directly" % (what, target))


def read(path, **kw):
    fd = os.open(path, os.O_RDONLY, **kw)
    data = os.read(fd, 100)
    return fd, data


os.mkdir(mnt + "/d")
with open(mnt + "/d/f", "w") as f:
    f.write("inside\n")
for path in (mnt + "/d/f", "./" + mnt + "//d/f"):
    fd, data = read(path)
    assert data == b"inside\n", (path, data)
    served(fd, path)
    os.close(fd)
d = os.open(mnt + "/d", os.O_RDONLY | os.O_DIRECTORY)
served(d, "the directory")
fd, data = read("f", dir_fd=d)
assert data == b"inside\n", data
served(fd, "f relative to the directory")
# In and out again: the kernel's answer, the same file.
fd, data = read(mnt + "/d/../d/f")
assert data == b"inside\n", data
os.chdir(mnt + "/d")
assert os.getcwd().endswith("/" + mnt + "/d"), os.getcwd()
fd, data = read("f")
served(fd, "f relative to the working directory")
# ".." from inside the mount climbs out of it, to the host.
fd, data = read("../../" + host_file)
assert data == b"on the host\n", data
os.chdir("..")
fd, data = read("d/f")
assert data == b"inside\n", data
fd, data = read("../" + host_file)
assert data == b"on the host\n", data
print("relative ok")
