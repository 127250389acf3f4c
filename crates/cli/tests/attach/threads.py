"""Threads of a fresh attached process write their first files at once (every one of
them may find no posting connection yet and open one). Prints "threads ok"."""
import os
import sys
import threading

root, n = sys.argv[1], int(sys.argv[2])
gate = threading.Barrier(n)
failed = []


def work(i):
    path = os.path.join(root, f"t{os.getpid()}-{i}")
    try:
        gate.wait()
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
        os.close(fd)
        with open(path, "rb") as f:
            assert f.read() == b"x" * 4096, path
    except Exception as e:  # reported below, so the test says what went wrong
        failed.append(f"{path}: {e!r}")


threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    sys.exit("\n".join(failed))
print("threads ok")
