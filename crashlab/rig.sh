#!/bin/bash
# crashlab rig: run a workload in a QEMU guest (TCG) whose disk is logged by QEMU's blklogwrites
# driver, then replay the log and check every flush/FUA point (mount + verifier + fsck) on the host
# (f2fs: in a second guest booted with the same kernel, since the host kernel may lack f2fs).
# Fresh Debian 12, as root. See crashlab/README.md. Knobs (environment):
#   CRASHLAB_FS="ext4 xfs btrfs"   filesystems for the normal run: ext4, ext4-fc (ext4 made with
#                                  -O fast_commit, mounted as ext4), ext4-inline (ext4 made with
#                                  -I 512 -O inline_data, the workload's payloads mostly small
#                                  enough to live in the inode), ext4-async (ext4 mounted
#                                  data=writeback,journal_async_commit by guest/init),
#                                  ext4-inline-async (both), xfs,
#                                  btrfs, f2fs (not in the defaults; its replay check runs in
#                                  a QEMU guest, 2 GiB)
#   CRASHLAB_NEGATIVE="ext4 xfs btrfs"  filesystems for the negative control ("" to skip)
#   CRASHLAB_JOBS=120              workload --jobs for the normal run (about 400-580 crash states)
#   CRASHLAB_NEG_JOBS=15           workload --jobs for the negative control
#   CRASHLAB_THREADS=3             workload --threads for the normal run (one handle shared; the
#                                  negative control runs one thread, so no other thread's
#                                  barrier can hide its skipped fsyncs by chance)
#   CRASHLAB_NEG_FLAG=--skip-file-fsync
#   CRASHLAB_WORKLOAD_ARGS=""      extra workload arguments (both runs)
#   CRASHLAB_POINTS=flush          crash states at each flush/FUA ("all": after every write too)
#   CRASHLAB_EVERY=1 CRASHLAB_LIMIT=0   check every Kth such point / at most N states (0 = all)
#   CRASHLAB_MIN_STATES=300        fail a normal run that checked fewer crash states
#   CRASHLAB_GUEST_MOUNT_OPTS=defaults    guest mount options (e.g. data=writeback for ext4)
#   CRASHLAB_WORKLOAD=steadq-workload     guest binary (a bin of the crashlab crate)
#   CRASHLAB_VERIFY=steadq-verify         per-state verifier (a bin of the crashlab crate), run as
#                                         `<bin> --marks {marks} {mnt}`; or give the whole command:
#   CRASHLAB_CHECK='<cmd with {marks} {mnt} {img} {fs} {state}>'   (exit 0 OK, 1 violation)
#   CRASHLAB_CACHE=<target>/crashlab-cache  CRASHLAB_WORK=<target>/crashlab-work
#   CRASHLAB_SCRATCH=/dev/shm/...  where crash-state images are copied (tmpfs is fastest)
#   CRASHLAB_SKIP_APT=1            do not apt-get install missing packages
#   CRASHLAB_VM_TIMEOUT=900        seconds before a guest run is declared hung
#   CRASHLAB_CHECK_TIMEOUT=7200    seconds before f2fs's guest check is declared hung
# Usage: rig.sh [ci|big] [--fs "LIST"] [--break NAME]   ci (default): the bounded pass; big:
#   800 jobs, at least 2000 states each. --fs LIST: the filesystems of both the normal run and
#   the negative control (instead of CRASHLAB_FS and CRASHLAB_NEGATIVE). --break NAME: only
#   negative controls, on CRASHLAB_NEGATIVE, each with the barrier NAME removed
#   (steadq::sys::Barrier; several joined by +) instead of CRASHLAB_NEG_FLAG; caught = at
#   least one violating state.
set -euo pipefail

MODE=ci; BREAK=; FS_ARG=
while [ $# -gt 0 ]; do
  case $1 in
    ci) MODE=ci; shift ;;
    big) MODE=big; shift ;;
    --break) BREAK=${2:?--break needs a barrier name}; shift 2 ;;
    --fs) FS_ARG=${2:?--fs needs filesystems}; shift 2 ;;
    *) echo "usage: $0 [ci|big] [--fs \"LIST\"] [--break NAME]" >&2; exit 2 ;;
  esac
done
case $MODE in
  ci) ;;
  big) : "${CRASHLAB_JOBS:=800}" "${CRASHLAB_MIN_STATES:=2000}" ;;
esac
case $BREAK in *[!a-z+-]*) echo "rig.sh: --break takes barrier names joined by +" >&2; exit 2 ;; esac
[ -n "$FS_ARG" ] && CRASHLAB_FS=$FS_ARG CRASHLAB_NEGATIVE=$FS_ARG
if [ -n "$BREAK" ]; then CRASHLAB_FS=; CRASHLAB_NEG_FLAG="--break $BREAK"; fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$REPO/crashlab
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
CACHE=${CRASHLAB_CACHE:-$TARGET_DIR/crashlab-cache}
WORK=${CRASHLAB_WORK:-$TARGET_DIR/crashlab-work}
FSLIST=${CRASHLAB_FS-ext4 xfs btrfs}
NEGLIST=${CRASHLAB_NEGATIVE-ext4 xfs btrfs}
JOBS=${CRASHLAB_JOBS:-120}
NEG_JOBS=${CRASHLAB_NEG_JOBS:-15}
THREADS=${CRASHLAB_THREADS:-3}
NEG_FLAG=${CRASHLAB_NEG_FLAG:---skip-file-fsync}
EXTRA_ARGS=${CRASHLAB_WORKLOAD_ARGS:-}
POINTS=${CRASHLAB_POINTS:-flush}
EVERY=${CRASHLAB_EVERY:-1}
LIMIT=${CRASHLAB_LIMIT:-0}
MIN_STATES=${CRASHLAB_MIN_STATES:-300}
WORKLOAD=${CRASHLAB_WORKLOAD:-steadq-workload}
VM_TIMEOUT=${CRASHLAB_VM_TIMEOUT:-900}
CHECK_TIMEOUT=${CRASHLAB_CHECK_TIMEOUT:-7200}
MUSL=x86_64-unknown-linux-musl
BIN=$TARGET_DIR/$MUSL/release
VERIFY=${CRASHLAB_VERIFY:-steadq-verify}
GUEST_MOPTS=${CRASHLAB_GUEST_MOUNT_OPTS:-defaults}
DEFAULT_CHECK="$BIN/$VERIFY --marks {marks} {mnt}"
CHECK=${CRASHLAB_CHECK:-$DEFAULT_CHECK}
DISK_MB=512          # virtual disk
FS_MB=400            # filesystem; nothing of it lives past 400 MiB
MARKBASE=$((448 * 1024 * 1024))   # in-band marks from here: (512-448) MiB / 4 KiB = 16384 marks

T_START=$(date +%s%N)
now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1e9}'; }
log() { echo "crashlab: $*"; }
die() { echo "crashlab: ERROR: $*" >&2; exit 1; }

# The mount type (and fsck, and guest module set) of a filesystem flavour: ext4-fc,
# ext4-inline, ext4-async and ext4-inline-async are ext4.
mount_type() { case $1 in ext4-fc|ext4-inline|ext4-async|ext4-inline-async) echo ext4 ;; *) echo "$1" ;; esac; }
for fs in $FSLIST $NEGLIST; do
  case $fs in ext4|ext4-fc|ext4-inline|ext4-async|ext4-inline-async|xfs|btrfs|f2fs) ;; *) die "unknown filesystem $fs (ext4, ext4-fc, ext4-inline, ext4-async, ext4-inline-async, xfs, btrfs, f2fs)" ;; esac
done
# f2fs: the host kernel may lack it, so its replay check runs in a guest (guest_check below)
F2FS=; case " $FSLIST $NEGLIST " in *" f2fs "*) F2FS=1 ;; esac
[ "$(id -u)" = 0 ] || die "must run as root (loop mounts, mkfs)"

# ---- cleanup: qemu, replay, mounts and loop devices under our scratch/work dirs ----------------
QEMU_PID=; REPLAY_PID=; SCRATCH=; SCRATCH_MADE=
cleanup() {
  local rc=$?
  set +e
  # QEMU_PID is `timeout`, which passes SIGTERM on to qemu (and SIGKILLs it 5 s later if needed)
  if [ -n "$QEMU_PID" ] && kill -TERM "$QEMU_PID" 2>/dev/null; then
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.7; done
  fi
  [ -n "$REPLAY_PID" ] && kill "$REPLAY_PID" 2>/dev/null && sleep 0.5 || true
  local m
  for dir in "$SCRATCH" "$WORK"; do
    [ -n "$dir" ] || continue
    for m in $(findmnt -rn -o TARGET 2>/dev/null | grep -F "$dir/" || true); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    losetup --list --noheadings --raw -O NAME,BACK-FILE 2>/dev/null | awk -v d="$dir/" 'index($2, d) == 1 {print $1}' |
      while read -r l; do losetup -d "$l" 2>/dev/null || true; done
  done
  [ -n "$SCRATCH_MADE" ] && rm -rf "$SCRATCH"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. host packages --------------------------------------------------------------------------
PKGS="qemu-system-x86 busybox-static xfsprogs btrfs-progs cpio kmod e2fsprogs"
[ -n "$F2FS" ] && PKGS="$PKGS f2fs-tools"
t=$(now)
# shellcheck source=guest/packages.sh
. "$HERE/guest/packages.sh"
# shellcheck disable=SC2086
crashlab_packages $PKGS
T_APT=$(secs "$t" "$(now)")

# ---- 2. build the workload, verifier and replay (static, so the guest can run them) -----------
t=$(now)
rustup target list --installed 2>/dev/null | grep -qx $MUSL || rustup target add $MUSL
bins="$WORKLOAD replay"; [ -n "${CRASHLAB_CHECK:-}" ] || bins="$bins $VERIFY"
# shellcheck disable=SC2046
(cd "$REPO" && CARGO_TARGET_DIR=$TARGET_DIR cargo build -q --release -p crashlab --target $MUSL $(printf -- '--bin %s ' $bins))
for b in $bins; do
  [ -x "$BIN/$b" ] || die "$BIN/$b was not built (is it a [[bin]] of crashlab/Cargo.toml?)"
done
T_BUILD=$(secs "$t" "$(now)")

# ---- 3. guest kernel: Debian's current linux-image-amd64, modules per filesystem (shared) -----
t=$(now)
# shellcheck source=guest/kernel.sh
. "$HERE/guest/kernel.sh"
crashlab_kernel "$CACHE"
T_KERNEL=$(secs "$t" "$(now)")

# ---- 4. initramfs: busybox + /init + modules + workload, cached by content --------------------
t=$(now)
KEY=$( (cat "$HERE/guest/init" "$BIN/$WORKLOAD" /bin/busybox; ls -l "$KDIR/mods"; cat "$KDIR/mods"/*.order) | sha256sum | cut -c1-16)
INITRD=$CACHE/initrd-$KEY.gz
if [ ! -f "$INITRD" ]; then
  R=$(mktemp -d)
  mkdir -p "$R/bin" "$R/mods"
  cp /bin/busybox "$R/bin/busybox"
  cp "$HERE/guest/init" "$R/init"; chmod 755 "$R/init"
  cp "$BIN/$WORKLOAD" "$R/workload"
  cp "$KDIR/mods"/* "$R/mods/"
  rm -f "$CACHE"/initrd-*.gz
  (cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"; rm -rf "$R"
fi
# f2fs's check guest: busybox, /init, the virtio, loop and f2fs modules, replay, the verifier (at
# its host path, so the check command is the same as on the host), and the host's fsck.f2fs, cp
# (replay copies with --sparse, which busybox's cp lacks), mount and umount with their libraries
CHECK_INITRD=
if [ -n "$F2FS" ]; then
  [ -f "$KDIR/mods/loop.order" ] || die "$KDIR has no loop module set"
  TOOLS=
  for b in fsck.f2fs cp mount umount; do TOOLS="$TOOLS $(command -v $b)" || die "$b not found"; done
  vbin=; [ -n "${CRASHLAB_CHECK:-}" ] || vbin=$BIN/$VERIFY
  # shellcheck disable=SC2086
  KEY=$( (cat "$HERE/guest/init" "$BIN/replay" $vbin /bin/busybox $TOOLS; ls -l "$KDIR/mods"; cat "$KDIR/mods"/*.order) | sha256sum | cut -c1-16)
  CHECK_INITRD=$CACHE/check-initrd-$KEY.gz
  if [ ! -f "$CHECK_INITRD" ]; then
    R=$(mktemp -d)
    mkdir -p "$R/bin" "$R/mods" "$R/usr/bin"
    cp /bin/busybox "$R/bin/busybox"
    cp "$HERE/guest/init" "$R/init"; chmod 755 "$R/init"
    cp "$BIN/replay" "$R/replay"
    [ -z "$vbin" ] || { mkdir -p "$R$BIN"; cp "$vbin" "$R$vbin"; }
    for set in common loop f2fs; do
      while read -r m; do cp "$KDIR/mods/$m.ko" "$R/mods/"; done < "$KDIR/mods/$set.order"
      cp "$KDIR/mods/$set.order" "$R/mods/"
    done
    # shellcheck disable=SC2086
    cp $TOOLS "$R/usr/bin/"
    # their shared libraries, at the paths the dynamic loader looks them up at (as bench/flash.sh)
    for b in "$R"/usr/bin/*; do
      ldd "$b" | awk '/=> \//{print $3} /^\t\/lib/{print $1}'
    done | sort -u | while read -r lib; do
      mkdir -p "$R$(dirname "$lib")"; cp -L "$lib" "$R$lib"
    done
    rm -f "$CACHE"/check-initrd-*.gz
    (cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$CHECK_INITRD.tmp"
    mv "$CHECK_INITRD.tmp" "$CHECK_INITRD"; rm -rf "$R"
  fi
fi
T_INITRD=$(secs "$t" "$(now)")
log "kernel $KPKG ($KDEBVER), initramfs $(basename "$INITRD"); setup: apt ${T_APT}s build ${T_BUILD}s kernel ${T_KERNEL}s initramfs ${T_INITRD}s"

# ---- scratch for crash-state images: tmpfs if there is one ------------------------------------
if [ -n "${CRASHLAB_SCRATCH:-}" ]; then SCRATCH=$CRASHLAB_SCRATCH
elif [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then SCRATCH=/dev/shm/crashlab.$$
else SCRATCH=$WORK/scratch.$$; fi
mkdir -p "$SCRATCH" "$WORK"; SCRATCH_MADE=1

# ---- 5. one case: mkfs, guest run under blklogwrites, replay ----------------------------------
RESULTS=(); FC=()
PASSED=0; FAILED=0
run_case() {   # name fs kind(normal|negative) workload-args...
  local name=$1 fs=$2 kind=$3; shift 3
  local d=$WORK/$name wargs="$*" t0 t1 t2 rc states bad
  case $fs in ext4-inline|ext4-inline-async) wargs="$wargs --small" ;; esac
  rm -rf "$d"; mkdir -p "$d"
  t0=$(now)
  truncate -s ${DISK_MB}M "$d/disk.img"
  case $fs in
    # ext4-async: the guest mounts it data=writeback,journal_async_commit (guest/init)
    ext4|ext4-async) mkfs.ext4 -q -F "$d/disk.img" ${FS_MB}M ;;
    # fast commits: an fsync commits only the file's (and its moves') changes, not the journal
    ext4-fc) mkfs.ext4 -q -F -O fast_commit "$d/disk.img" ${FS_MB}M ;;
    # inline data: a job file of up to 384 bytes lives in its 512-byte inode, no data block
    # ext4-inline-async: the same, mounted as ext4-async is
    ext4-inline|ext4-inline-async) mkfs.ext4 -q -F -I 512 -O inline_data "$d/disk.img" ${FS_MB}M ;;
    xfs) mkfs.xfs -q -f -d size=${FS_MB}m "$d/disk.img" ;;
    btrfs) mkfs.btrfs -q -f -b ${FS_MB}M "$d/disk.img" >/dev/null ;;
    f2fs) mkfs.f2fs -q -f "$d/disk.img" $((FS_MB * 2048)) ;;   # size in 512-byte sectors
    *) die "unknown fs $fs" ;;
  esac
  cp --sparse=always "$d/disk.img" "$d/base.img"
  : > "$d/log.bin"
  log "[$name] guest: $fs (-o $GUEST_MOPTS), workload $WORKLOAD $wargs"
  timeout -k 5 "$VM_TIMEOUT" qemu-system-x86_64 -accel tcg -m 512 -smp 1 -nographic -no-reboot -net none \
    -kernel "$KDIR/vmlinuz" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet crashlab.fs=$fs crashlab.markbase=$MARKBASE crashlab.mopts=$GUEST_MOPTS crashlab.args=$(echo "$wargs" | tr ' ' ,)" \
    -drive "if=none,id=d0,driver=blklogwrites,file.driver=file,file.filename=$d/disk.img,log.driver=file,log.filename=$d/log.bin" \
    -device virtio-blk-pci,drive=d0 > "$d/console.log" 2>&1 < /dev/null &
  QEMU_PID=$!
  rc=0; wait $QEMU_PID || rc=$?
  QEMU_PID=
  t1=$(now)
  if ! grep -q '^CRASHLAB_WORKLOAD_RC=0' "$d/console.log" || ! grep -q '^CRASHLAB_UMOUNT_OK' "$d/console.log"; then
    tail -30 "$d/console.log" | sed 's/^/    /'
    die "[$name] guest run failed (qemu rc=$rc), console: $d/console.log"
  fi
  grep -E '^CRASHLAB_(WORKLOAD_OK|WORKLOAD_SKIPPED|FC|MOUNTED|UMOUNT_OK)' "$d/console.log" | tr -d '\r' | sed "s/^/    [$name] /"
  # the parser must reproduce the guest's final disk exactly (below markbase)
  "$BIN/replay" apply --base "$d/base.img" --log "$d/log.bin" --markbase $MARKBASE --out "$SCRATCH/final.img" > "$d/apply.out"
  cmp -n $MARKBASE "$SCRATCH/final.img" "$d/disk.img" > /dev/null ||
    die "[$name] replaying the whole log does not reproduce the guest's disk (parser bug?)"
  rm -f "$SCRATCH/final.img" "$d/disk.img"
  # ext4-fc: the guest's fast commits (should be > 0) and the fsyncs that fell back to a full commit
  [ "$fs" = ext4-fc ] && FC+=("$name: $(grep -a '^CRASHLAB_FC' "$d/console.log" | tail -1 | tr -d '\r' | cut -d' ' -f2-)")
  local extra=(--min-states "$MIN_STATES")
  [ "$kind" = negative ] && extra=(--expect-violations)
  rc=0
  if [ "$fs" = f2fs ]; then
    guest_check "$name" "$d" --label "$name" --markbase $MARKBASE --check "$CHECK" \
      --points "$POINTS" --every "$EVERY" --limit "$LIMIT" "${extra[@]}" || rc=$?
  else
    "$BIN/replay" check --fs "$(mount_type "$fs")" --label "$name" --base "$d/base.img" --log "$d/log.bin" \
      --markbase $MARKBASE --scratch "$SCRATCH/$name" --check "$CHECK" \
      --points "$POINTS" --every "$EVERY" --limit "$LIMIT" --keep-bad "$d/bad" "${extra[@]}" > "$d/replay.out" 2>&1 &
    REPLAY_PID=$!
    wait $REPLAY_PID || rc=$?
    REPLAY_PID=
  fi
  t2=$(now)
  rm -rf "${SCRATCH:?}/$name"
  grep -E '^BAD' "$d/replay.out" | head -3 | cut -c1-400 | sed "s/^/    [$name] /" || true
  grep -E 'RIG ERROR|^SUMMARY|crash states checked|negative control|FAILED' "$d/replay.out" | sed "s/^/    /" || true
  states=$(sed -n 's/^SUMMARY.* states=\([0-9]*\) .*/\1/p' "$d/replay.out"); states=${states:-?}
  bad=$(sed -n 's/^SUMMARY.* violations=\([0-9]*\) .*/\1/p' "$d/replay.out"); bad=${bad:-?}
  local verdict
  if [ $rc = 0 ]; then verdict=PASS; PASSED=$((PASSED + 1)); else verdict="FAIL(rc=$rc)"; FAILED=$((FAILED + 1)); fi
  [ "$kind" = negative ] && [ $rc = 0 ] && verdict="PASS(caught)"
  [ "$kind" = negative ] && [ $rc = 1 ] && verdict="FAIL(NOT CAUGHT)"
  RESULTS+=("$(printf '%-12s %-7s %-9s %7s %10s %7s %9s %8s  %s' "$name" "$fs" "$kind" "$states" "$bad" \
    "$(secs "$t0" "$t1")" "$(secs "$t1" "$t2")" "$(secs "$t0" "$t2")" "$verdict")")
  log "[$name] ${RESULTS[-1]}"
}

# `replay check` in a guest (f2fs): base.img and log.bin as read-only disks /dev/vda and /dev/vdb,
# the other arguments on the kernel command line (words joined by commas, a space inside one
# as ~), a tmpfs scratch; its output (between the console's markers) goes to replay.out and
# its exit status is returned, 3 (rig error) if the guest did not finish. No --keep-bad there.
guest_check() {   # name dir replay-args...
  local name=$1 d=$2 w enc= qrc=0 rc; shift 2
  for w in "$@"; do
    case $w in *[,~]*) die "[$name] replay argument '$w' has a comma or ~ (guest check)" ;; esac
    enc="$enc${enc:+,}${w// /\~}"
  done
  timeout -k 5 "$CHECK_TIMEOUT" qemu-system-x86_64 -accel tcg -m 2048 -smp 1 -nographic -no-reboot -net none \
    -kernel "$KDIR/vmlinuz" -initrd "$CHECK_INITRD" \
    -append "console=ttyS0 panic=-1 quiet crashlab.mode=check crashlab.fs=f2fs crashlab.args=$enc" \
    -drive "file=$d/base.img,format=raw,if=virtio,readonly=on" \
    -drive "file=$d/log.bin,format=raw,if=virtio,readonly=on" > "$d/check-console.log" 2>&1 < /dev/null &
  QEMU_PID=$!
  wait $QEMU_PID || qrc=$?
  QEMU_PID=
  tr -d '\r' < "$d/check-console.log" | sed -n '/^CRASHLAB_CHECK_BEGIN$/,/^CRASHLAB_CHECK_END$/p' | sed '1d;$d' > "$d/replay.out"
  rc=$(tr -d '\r' < "$d/check-console.log" | sed -n 's/^CRASHLAB_CHECK_RC=\([0-9]*\).*/\1/p')
  if [ -z "$rc" ]; then
    echo "replay: RIG ERROR: the check guest did not finish (qemu rc=$qrc), console: $d/check-console.log" >> "$d/replay.out"
    tail -30 "$d/check-console.log" | sed 's/^/    /'
    rc=3
  fi
  return "$rc"
}

for fs in $FSLIST; do
  run_case "$fs" "$fs" normal --jobs "$JOBS" --threads "$THREADS" $EXTRA_ARGS
done
for fs in $NEGLIST; do
  # shellcheck disable=SC2086
  run_case "neg-$fs" "$fs" negative --jobs "$NEG_JOBS" $NEG_FLAG $EXTRA_ARGS
done

echo
log "summary (times in seconds; logs in $WORK/<case>/)"
printf '  %-12s %-7s %-9s %7s %10s %7s %9s %8s  %s\n' case fs kind states violations vm replay total result
for r in "${RESULTS[@]}"; do echo "  $r"; done
for f in "${FC[@]}"; do log "fast commits (ext4-fc) $f"; done
log "setup: apt ${T_APT}s build ${T_BUILD}s kernel ${T_KERNEL}s initramfs ${T_INITRD}s; whole rig $(secs "$T_START" "$(now)")s"
echo "crashlab: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
