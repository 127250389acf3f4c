# `scripts/cluster nfs`, sourced by scripts/cluster (its helpers and teardown): NFS-Ganesha
# with FSAL_VFS exports an augefs mount; libnfs clients (this kernel has no NFS client)
# copy TREE in and out; a client holding NFSv3 handles reads by them after augefs is
# remounted under the running server.
#
# Ganesha keeps the exported directory open for as long as it exports it, so the
# remount is: drop the export (SIGHUP with the export taken out of the configuration),
# unmount and mount augefs, export again (SIGHUP). Ganesha's handles name the file
# system by st_dev (FUSE reports statfs f_fsid 0), so they survive the remount when
# the new mount gets the same device number, as it does unless another anonymous-device
# mount took the number meanwhile (README).

for c in ganesha.nfsd nfs-cp nfs-ls rpcbind cc; do
  command -v $c >/dev/null || skip "$c is not installed (Debian: nfs-ganesha nfs-ganesha-vfs libnfs-utils libnfs-dev rpcbind gcc)"
done
[ -f /usr/include/nfsc/libnfs.h ] || skip "libnfs.h is missing (Debian: libnfs-dev)"
RPCBIND_PID=""
nfs_cleanup() {
  if [ -n "$RPCBIND_PID" ]; then kill "$RPCBIND_PID" 2>/dev/null || true; fi
  cleanup
}
trap nfs_cleanup EXIT

cc -O1 -Wall -Werror -o "$DIR/nfs_handles" crates/cli/tests/cluster/nfs_handles.c -lnfs
EXP=$DIR/nfs
augefs_mount "$DIR/nfs.img" "$EXP"
if ! rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
  mkdir -p /run/rpcbind
  rpcbind -f -w &
  RPCBIND_PID=$!
  sleep 0.5
  rpcinfo -p 127.0.0.1 >/dev/null 2>&1 || skip "rpcbind cannot run here"
fi
ss -ltn | grep -q ':2049 ' && skip "port 2049 is taken: another NFS server runs"
export_block="EXPORT { Export_Id = 1; Path = $EXP; Pseudo = /augefs; Access_Type = RW;
  Squash = No_Root_Squash; Protocols = 3, 4; Transports = TCP; SecType = sys;
  FSAL { Name = VFS; } }"
ganesha_conf() { # with|without the export
  {
    echo "NFS_CORE_PARAM { Protocols = 3, 4; Enable_NLM = false; Enable_RQUOTA = false; Bind_addr = 127.0.0.1; }"
    echo "NFSV4 { Graceless = true; }"
    echo "NFS_KRB5 { Active_krb5 = false; }"
    if [ "$1" = with ]; then echo "$export_block"; fi
  } >"$DIR/ganesha.conf"
}
ganesha_conf with
ganesha.nfsd -F -f "$DIR/ganesha.conf" -L "$DIR/ganesha.log" -p "$DIR/ganesha.pid" -N NIV_EVENT &
GANESHA_PID=$!
URL=nfs://127.0.0.1$EXP
for t in $(seq 100); do nfs-ls "$URL" >/dev/null 2>&1 && break; sleep 0.2; done
nfs-ls "$URL" >/dev/null || skip "ganesha does not serve $EXP: $(grep -v DBUS "$DIR/ganesha.log" | tail -3)"
say "ganesha (pid $GANESHA_PID) exports $EXP"

# Through NFS: every file of TREE in (directories made on the server: libnfs-utils has
# no mkdir), then every file out again, compared.
files=$(cd "$TREE" && find . -type f | sed 's#^\./##')
(cd "$TREE" && find . -type d -exec mkdir -p "$EXP/tree/{}" \;)
n=0
while IFS= read -r f; do
  nfs-cp "$TREE/$f" "$URL/tree/$f" >/dev/null || die "nfs-cp into $URL/tree/$f failed"
  n=$((n + 1))
done <<<"$files"
read_back() { # DEST: every file of the tree out through NFS into DEST, compared with TREE
  (cd "$TREE" && find . -type d -exec mkdir -p "$1/{}" \;)
  while IFS= read -r f; do
    nfs-cp "$URL/tree/$f" "$1/$f" >/dev/null || die "nfs-cp from $URL/tree/$f failed"
  done <<<"$files"
  same_tree "$TREE" "$1"
}
read_back "$DIR/back1"
listed=$(nfs-ls -R "$URL/tree" | grep -c '^-') || true
[ "$listed" = "$n" ] || die "nfs-ls -R lists $listed files, $n were copied"
say "nfs: $n files copied in with nfs-cp, read back identical, nfs-ls -R lists them all"

# Handles across a remount of augefs under the running server.
held=$(head -n 20 <<<"$files" | sed 's#^#/tree/#')
dev_before=$(stat -c %d "$EXP")
mkfifo "$DIR/go"
# shellcheck disable=SC2086 # held: paths without spaces (the first 20 of TREE)
"$DIR/nfs_handles" 127.0.0.1 "$EXP" $held <"$DIR/go" >"$DIR/handles.out" 2>&1 &
client=$!
exec 9>"$DIR/go"
for t in $(seq 100); do grep -q '^opened' "$DIR/handles.out" && break; sleep 0.1; done
grep -q '^opened' "$DIR/handles.out" || die "nfs_handles: $(cat "$DIR/handles.out")"
ganesha_conf without
kill -HUP "$GANESHA_PID"
for t in $(seq 50); do fuser -m "$EXP" >/dev/null 2>&1 || break; sleep 0.1; done
augefs_umount "$EXP"
augefs_remount "$DIR/nfs.img" "$EXP"
ganesha_conf with
kill -HUP "$GANESHA_PID"
for t in $(seq 100); do nfs-ls "$URL" >/dev/null 2>&1 && break; sleep 0.2; done
echo go >&9
exec 9>&-
wait "$client" || die "handles after the remount (st_dev $dev_before, now $(stat -c %d "$EXP")): $(cat "$DIR/handles.out")"
say "nfs: augefs remounted under the running ganesha (st_dev $dev_before, now $(stat -c %d "$EXP")); $(tail -1 "$DIR/handles.out") by the handles taken before"
read_back "$DIR/back2"
say "nfs: the tree reads back identical after the remount"
kill "$GANESHA_PID"
wait "$GANESHA_PID" || true
GANESHA_PID=""
augefs_umount "$EXP"
"$A" fsck -n "$DIR/nfs.img" >"$DIR/nfs.fsck" 2>&1 || { cat "$DIR/nfs.fsck" >&2; die "fsck of nfs.img is not clean"; }
say "ok: NFS export of augefs: tree identical through ganesha, before and after a remount; handles valid across it; fsck clean"
