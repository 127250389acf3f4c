# Children of an attached process: a forked child, a fork+exec, system(), popen() and
# posix_spawn; each writes its own file under the mount, the parent reads them all.
import os, subprocess, sys
mnt = sys.argv[1]
pid = os.fork()
if pid == 0:
    with open(mnt + "/forked", "w") as f:
        f.write("forked %d\n" % os.getpid())
    os._exit(0)
os.waitpid(pid, 0)
os.system("echo system > %s/system" % mnt)
with os.popen("cat %s/forked" % mnt) as p:
    seen = p.read()
subprocess.run(["sh", "-c", "echo spawned > %s/spawned" % mnt], check=True)
os.posix_spawn("/bin/sh", ["sh", "-c", "cp %s/system %s/copied" % (mnt, mnt)], os.environ)
os.wait()
for name, want in [("forked", seen), ("system", "system\n"), ("spawned", "spawned\n"), ("copied", "system\n")]:
    got = open(mnt + "/" + name).read()
    assert got == want and got, (name, got, want)
print("family ok")
