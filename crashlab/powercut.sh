#!/bin/bash
# crashlab power-cut rig. See crashlab/README.md ("Power cuts").
#
#   powercut.sh virtual --fs ext4|ext4-fc|ext4-inline|ext4-async|ext4-inline-async|xfs|f2fs --cycles N [--seed S] [--break BARRIER[,BARRIER]]
#                       [--cut-after KIND|rotate] [--window LO-HI] [--transport tcp|serial]
#   powercut.sh real --board boards/pi-4.toml --cycles N [--seed S] [powercut real options]
#
# virtual: a fresh Debian 12 host, as root. Installs its apt packages, builds the static agent
# and steadq (with --break NAME the agent removes that barrier, steadq::sys::Barrier's name,
# e.g. enqueue-dir or ack-dest; `ack-barriers` is ack-dest,ack-source; a negative control),
# fetches Debian's kernel once (crashlab/guest/kernel.sh, shared with rig.sh), builds the
# initramfs (crashlab/guest/init, shared with rig.sh), makes the disk image, then runs the
# controller: boot, report, verify, work, cut, N times, and a last boot to verify the last cut.
# Last line: `powercut fs=FS cycles=N confirmed=M violations=V`; exit 0 only when V is 0
# (with --break: only when the removed barrier was caught). ext4-fc: ext4 made with
# -O fast_commit (the guest mounts it as ext4; the summary shows its fast commits); ext4-inline:
# ext4 made with -I 512 -O inline_data, the agent run with --small; ext4-async: ext4 mounted
# data=writeback,journal_async_commit (one cache flush a commit, not two; guest/init);
# ext4-inline-async: made as ext4-inline, mounted as ext4-async.
# Knobs (environment): CRASHLAB_CACHE=/var/cache/crashlab (kernel, initramfs),
#   CRASHLAB_POWERCUT_WORK=/dev/shm/crashlab-powercut (disk images, records, CSV, chart),
#   CRASHLAB_SKIP_APT=1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$REPO/crashlab
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
CACHE=${CRASHLAB_CACHE:-/var/cache/crashlab}
MUSL=x86_64-unknown-linux-musl
log() { echo "powercut: $*" >&2; }
die() { echo "powercut: ERROR: $*" >&2; exit 2; }
usage() { sed -n 4,6p "$0" | sed 's/^# //' >&2; exit 2; }

MODE=${1:-}; shift || true
case $MODE in
  virtual) ;;
  real)
    (cd "$REPO" && cargo build -q --release -p crashlab --bin powercut)
    # Power back on however this ends: the controller restores the relay on exit and error; on
    # Ctrl-C or a kill, this trap drives the line to "power on" (wire the relay's NC contact so
    # that a released line leaves the device powered, too).
    BOARD=; CUT_LEVEL=1; a=("$@")
    for i in "${!a[@]}"; do
      [ "${a[$i]}" = --board ] && BOARD=${a[$((i+1))]}
      [ "${a[$i]}" = --cut-level ] && CUT_LEVEL=${a[$((i+1))]}
    done
    [ -n "$BOARD" ] || die "real needs --board boards/<board>.toml"
    CHIP=$(sed -n 's/^gpio_chip *= *"\(.*\)"/\1/p' "$BOARD"); LINE=$(sed -n 's/^gpio_line *= *//p' "$BOARD")
    restore() {
      local on=$((1 - CUT_LEVEL))
      if gpioset --version | grep -q ' v2'; then timeout 1 gpioset --chip "$CHIP" "$LINE=$on" || true
      else gpioset "$CHIP" "$LINE=$on" || true; fi
    }
    trap restore EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    rc=0; "$TARGET_DIR/release/powercut" real "$@" || rc=$?
    exit $rc ;;
  *) usage ;;
esac

FS=; CYCLES=; SEED=$(date +%s); BREAK=; WINDOW=1000-3000; TRANSPORT=tcp; CUT_AFTER=rotate
while [ $# -gt 0 ]; do
  case $1 in
    --fs) FS=$2; shift 2 ;;
    --cycles) CYCLES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --break) BREAK=$2; shift 2 ;;
    --cut-after) CUT_AFTER=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    --transport) TRANSPORT=$2; shift 2 ;;
    *) usage ;;
  esac
done
case $FS in ext4|ext4-fc|ext4-inline|ext4-async|ext4-inline-async|xfs|f2fs) ;; *) die "--fs must be ext4, ext4-fc, ext4-inline, ext4-async, ext4-inline-async, xfs or f2fs" ;; esac
# the mount type (and guest module set) of a filesystem flavour
case $FS in ext4-fc|ext4-inline|ext4-async|ext4-inline-async) MFS=ext4 ;; *) MFS=$FS ;; esac
[ -n "$CYCLES" ] || usage
case $BREAK in *[!a-z,-]*) die "--break takes barrier names (steadq::sys::Barrier), comma-separated" ;; esac
[ "$(id -u)" = 0 ] || die "must run as root (mkfs on images, apt)"
WORK=${CRASHLAB_POWERCUT_WORK:-/dev/shm/crashlab-powercut}
T0=$(date +%s)

# ---- packages ----------------------------------------------------------------------------------
PKGS="qemu-system-x86 busybox-static cpio kmod e2fsprogs"
[ "$FS" = f2fs ] && PKGS="$PKGS f2fs-tools"
[ "$FS" = xfs ] && PKGS="$PKGS xfsprogs"
mkdir -p "$CACHE"
# apt and the kernel cache are shared by runs started side by side (CI runs ext4 and f2fs at once)
exec 9>"$CACHE/.lock"
flock 9
# shellcheck source=guest/packages.sh
. "$HERE/guest/packages.sh"
# shellcheck disable=SC2086
crashlab_packages $PKGS

# ---- static agent and steadq for the guest, controller for the host ---------------------------
rustup target list --installed 2>/dev/null | grep -qx $MUSL || rustup target add $MUSL
AGENT=powercut-agent
cd "$REPO"
cargo build -q --release -p crashlab --target $MUSL --bin powercut-agent
mkdir -p "$CACHE/bin"
cp "$TARGET_DIR/$MUSL/release/powercut-agent" "$CACHE/bin/$AGENT"
cargo build -q --release -p steadq-cli --target $MUSL --bin steadq
cargo build -q --release -p crashlab --bin powercut

# ---- kernel (shared with rig.sh) and initramfs ------------------------------------------------
# shellcheck source=guest/kernel.sh
. "$HERE/guest/kernel.sh"
crashlab_kernel "$CACHE"
flock -u 9
KEY=$( (cat "$HERE/guest/init" "$CACHE/bin/$AGENT" "$TARGET_DIR/$MUSL/release/steadq" /bin/busybox; ls -l "$KDIR/mods") | sha256sum | cut -c1-16)
INITRD=$CACHE/powercut-initrd-$MFS-$KEY.gz
if [ ! -f "$INITRD" ]; then
  R=$(mktemp -d)
  mkdir -p "$R/bin" "$R/mods"
  cp /bin/busybox "$R/bin/busybox"
  cp "$HERE/guest/init" "$R/init"; chmod 755 "$R/init"
  cp "$CACHE/bin/$AGENT" "$R/workload"
  cp "$TARGET_DIR/$MUSL/release/steadq" "$R/steadq"
  # only this filesystem's modules (and virtio, net): a smaller initramfs boots faster
  for set in common "$MFS" net; do
    cp "$KDIR/mods/$set.order" "$R/mods/"
    while read -r m; do cp "$KDIR/mods/$m.ko" "$R/mods/"; done < "$KDIR/mods/$set.order"
  done
  (cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp.$$"
  mv "$INITRD.tmp.$$" "$INITRD"; rm -rf "$R"
  # keep the two newest per filesystem
  ls -t "$CACHE"/powercut-initrd-"$MFS"-*.gz | tail -n +3 | xargs -r rm -f
fi

# ---- a fresh disk image ------------------------------------------------------------------------
RUN=$WORK/$FS${BREAK:+-broken-${BREAK//,/+}}
rm -rf "$RUN"; mkdir -p "$RUN"
# xfs needs at least 300 MiB (mkfs.xfs of xfsprogs 5.19 and later refuses less)
truncate -s "$([ "$FS" = xfs ] && echo 320M || echo 256M)" "$RUN/fresh.img"
case $FS in
  ext4|ext4-async) mkfs.ext4 -q -F "$RUN/fresh.img" ;;
  ext4-fc) mkfs.ext4 -q -F -O fast_commit "$RUN/fresh.img" ;;
  # inline data: job files of up to 384 bytes live in their 512-byte inodes (the agent
  # is given --small: three payloads in four of 16 to 255 bytes)
  ext4-inline|ext4-inline-async) mkfs.ext4 -q -F -I 512 -O inline_data "$RUN/fresh.img" ;;
  xfs) mkfs.xfs -q -f "$RUN/fresh.img" ;;
  f2fs) mkfs.f2fs -q -f "$RUN/fresh.img" >/dev/null ;;
esac
log "fs=$FS cycles=$CYCLES seed=$SEED window=${WINDOW}ms transport=$TRANSPORT cut-after=$CUT_AFTER${BREAK:+ BARRIER REMOVED: $BREAK}; kernel $KPKG; setup $(( $(date +%s) - T0 ))s; output in $RUN"

EXTRA=()
[ -n "$BREAK" ] && EXTRA=(--break "$BREAK")
rc=0
"$TARGET_DIR/release/powercut" virtual --fs "$FS" --cycles "$CYCLES" --seed "$SEED" \
  --window "$WINDOW" --transport "$TRANSPORT" --cut-after "$CUT_AFTER" --out "$RUN" --kernel "$KDIR/vmlinuz" \
  --initrd "$INITRD" --image "$RUN/fresh.img" "${EXTRA[@]}" || rc=$?
rm -f "$RUN/fresh.img" "$RUN/pre.img"
exit $rc
