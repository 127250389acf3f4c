# `scripts/cluster bench`, sourced by scripts/cluster (its helpers and teardown): one
# replica-3 volume per brick kind in KINDS, all served by one glusterd, mounted with the
# glusterfs client; the volumes take turns within each of RUNS runs. Workloads, each
# timed as wall time through the volume's mount:
#   tree    cp -a TREE into the volume
#   small   SMALL_FILES files of 4 KiB, each created, written, fsync'd and closed
#   sqlite  SQLITE_ROWS autocommit INSERTs by sqlite3 (rollback journal, synchronous=FULL)
# Prints per workload and kind the median, min-max and the ratio of the first kind's
# median to each kind's (above 1: faster than the first kind), and writes them with
# every run and the load into OUT/cluster.txt.

for c in python3 sqlite3 mkfs.xfs; do
  command -v $c >/dev/null || die "$c is missing (Debian: python3 sqlite3 xfsprogs)"
done
OUT=${OUT:-bench/results/$(date -u +%Y-%m-%dT%H-%M-%SZ)-cluster}
RAW=$DIR/runs.txt
: >"$RAW"
attach=""
for k in $KINDS; do
  bricks "$k"
  [ "$k" = attached ] && attach=$DIR/attached
done
glusterd_up $attach
for k in $KINDS; do volume_up "$k"; done
load_before=$(uptime)

elapsed() { # COMMAND...: runs it, prints its wall time in seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
small_files() { # DIR
  python3 - "$1" "$SMALL_FILES" <<'EOF'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
block = b"x" * 4096
for i in range(n):
    fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, block)
    os.fsync(fd)
    os.close(fd)
EOF
}
sqlite_inserts() { # DB
  {
    echo "PRAGMA synchronous=FULL; CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);"
    for i in $(seq "$SQLITE_ROWS"); do echo "INSERT INTO t(v) VALUES('row $i of the autocommit workload');"; done
  } | sqlite3 "$1"
}
kinds=($KINDS)
for r in $(seq "$RUNS"); do
  # Rotate the order, so neither kind always runs first after the other's writes.
  for ((j = 0; j < ${#kinds[@]}; j++)); do
    k=${kinds[$(((j + r) % ${#kinds[@]}))]}
    v=$DIR/vol-$k
    sync
    echo "$k tree $r $(elapsed cp -a "$TREE" "$v/tree$r")" >>"$RAW"
    echo "$k small $r $(elapsed small_files "$v/small$r")" >>"$RAW"
    echo "$k sqlite $r $(elapsed sqlite_inserts "$v/db$r")" >>"$RAW"
    [ "$(sqlite3 "$v/db$r" 'SELECT count(*) FROM t')" = "$SQLITE_ROWS" ] || die "sqlite rows missing on $k"
    same_tree "$TREE" "$v/tree$r"
  done
  say "run $r of $RUNS done"
done
load_after=$(uptime)

report() {
  echo "# scripts/cluster bench: GlusterFS replica-3 volume, bricks of each kind, $(date -u +%FT%TZ)"
  echo "# kinds: $KINDS (augefs: one augefs FUSE mount per brick; attached: three bricks in one augefs mount, brick processes attached; xfs: one xfs loop device per brick)"
  echo "# tree: cp -a $TREE ($(find "$TREE" -type f | wc -l) files); small: $SMALL_FILES x 4 KiB create+write+fsync+close; sqlite: $SQLITE_ROWS autocommit inserts, synchronous=FULL"
  echo "# runs: $RUNS; $(nproc) CPUs; kernel $(uname -r); $(gluster --version | head -1)"
  echo "# load before: $load_before"
  echo "# load after:  $load_after"
  python3 - "$RAW" $KINDS <<'EOF'
import statistics, sys
raw, kinds = sys.argv[1], sys.argv[2:]
runs = {}
for line in open(raw):
    k, w, _, s = line.split()
    runs.setdefault((w, k), []).append(float(s))
base = kinds[0]
print(f"{'workload':8} {'bricks':9} {'median s':>9} {'min-max s':>15} {'vs ' + base:>8}")
for w in ("tree", "small", "sqlite"):
    b = statistics.median(runs[(w, base)])
    for k in kinds:
        xs = runs[(w, k)]
        m = statistics.median(xs)
        print(f"{w:8} {k:9} {m:9.2f} {min(xs):7.2f}-{max(xs):<7.2f} {b / m:7.2f}x")
print("# every run (kind workload run seconds):")
for line in open(raw):
    print("#   " + line.strip())
EOF
}
report | tee "$DIR/cluster.txt"
if [ "$OUT" != - ]; then
  mkdir -p "$OUT"
  cp "$DIR/cluster.txt" "$OUT/"
  say "wrote $OUT/cluster.txt"
fi
