"""Two processes insert rows into one sqlite database at once, each in many small
transactions (BEGIN IMMEDIATE, one insert, COMMIT; a busy timeout waits for the other's
locks) for SECS seconds: `sqlite_writers.py DB SECS`. The parent is one writer, a child
process the other. Then the row count must equal the inserts both reported and
`PRAGMA integrity_check` must say ok. Prints "rows N ok".
"""
import os
import sqlite3
import subprocess
import sys
import time


def connect(db):
    con = sqlite3.connect(db, timeout=120, isolation_level=None)
    con.execute("PRAGMA busy_timeout=120000")
    return con


def write(db, who, secs):
    con = connect(db)
    n, deadline = 0, time.time() + secs
    while time.time() < deadline:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO t(w, v) VALUES(?, ?)", (who, os.urandom(16).hex()))
        con.execute("COMMIT")
        n += 1
    con.close()
    return n


if __name__ == "__main__":
    db, secs = sys.argv[1], float(sys.argv[2])
    if len(sys.argv) > 3:
        print(write(db, int(sys.argv[3]), secs), flush=True)
        sys.exit(0)
    con = connect(db)
    con.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, w INT, v TEXT)")
    con.close()
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), db, str(secs), "2"],
                             stdout=subprocess.PIPE, text=True)
    mine = write(db, 1, secs)
    theirs = int(child.communicate(timeout=secs + 300)[0])
    assert child.returncode == 0
    con = connect(db)
    rows = dict(con.execute("SELECT w, count(*) FROM t GROUP BY w").fetchall())
    assert rows == {1: mine, 2: theirs}, (rows, mine, theirs)
    assert mine > 0 and theirs > 0, (mine, theirs)
    check = con.execute("PRAGMA integrity_check").fetchall()
    assert check == [("ok",)], check
    print(f"rows {mine + theirs} ok (parent {mine}, child {theirs})")
