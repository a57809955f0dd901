#!/bin/bash
# steadq-bench on flash filesystems, in a QEMU guest (Debian's kernel: f2fs and dm-delay, which
# the host kernel may lack). See BENCHMARKS.md ("Flash").
#
#   bench/flash.sh [--profiles ext4,ext4-fc,f2fs,tmpfs,ext4+sd,f2fs+sd] [--delay-ms 2]
#                  [--disk-gib 2] [--cpus 2] [--out DIR] [-- steadq-bench options]
#
# Profiles: ext4 (mkfs.ext4 defaults), ext4-fc (-O fast_commit), ext4-inline (-I 512 -O
# inline_data), ext4-async (mounted data=writeback,journal_async_commit), ext4-inline-async (both),
# xfs, f2fs, tmpfs; NAME+sd is the SD-card profile: the same filesystem on a dm-delay target over
# the guest's disk that adds --delay-ms to every write and every flush. Each profile makes a
# fresh filesystem on one virtio disk (a sparse image file on the host, write-back cache:
# a guest flush is an fdatasync of that file). Default steadq-bench options:
# --duration 1.5 --rounds 5 --workers 1,8.
# Output: DIR (default bench/results/flash-<unix time>)/<profile>/{results.tsv,ratios.tsv,
# chart.svg,table.txt,log.txt,mount.txt} and console.log.
# As root: uses the crash rig's kernel cache (crashlab/guest/kernel.sh, CRASHLAB_CACHE, default
# /var/cache/crashlab) and adds dm-mod and dm-delay from the same kernel package. TCG (as the
# crash rig; FLASH_ACCEL=kvm where nested KVM works): CPU-bound figures are several times
# slower than native, so read the ratios, and the bytes and flushes per job.
# The guest runs the host's target/release/steadq-bench, redis-server, dmsetup, mkfs.ext4,
# mkfs.f2fs and mkfs.xfs with their shared libraries (a Debian 12 host: apt-get install
# qemu-system-x86 busybox-static redis-server dmsetup f2fs-tools xfsprogs e2fsprogs kmod cpio).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
CACHE=${CRASHLAB_CACHE:-/var/cache/crashlab}
log() { echo "flash: $*" >&2; }
die() { echo "flash: ERROR: $*" >&2; exit 2; }

PROFILES=ext4,ext4-fc,f2fs,tmpfs,ext4+sd,f2fs+sd; DELAY=2; GIB=2; CPUS=2
OUT=$REPO/bench/results/flash-$(date +%s)
BENCH_ARGS=(--duration 1.5 --rounds 5 --workers 1,8)
while [ $# -gt 0 ]; do
  case $1 in
    --profiles) PROFILES=$2; shift 2 ;;
    --delay-ms) DELAY=$2; shift 2 ;;
    --disk-gib) GIB=$2; shift 2 ;;
    --cpus) CPUS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; BENCH_ARGS=("$@"); break ;;
    *) echo "flash: unknown option $1" >&2; sed -n 5,6p "$0" | sed "s/^# //" >&2; exit 2 ;;
  esac
done
case $DELAY in *[!0-9]*|'') die "--delay-ms takes whole milliseconds" ;; esac
for a in "${BENCH_ARGS[@]}" "$PROFILES"; do
  case $a in *[!A-Za-z0-9.,:+_-]*|'') die "'$a': only letters, digits and . , : + _ - (it goes on the kernel command line)" ;; esac
done
[ "$(id -u)" = 0 ] || die "must run as root (mkfs, loop mount of the output disk)"
BENCH=$TARGET_DIR/release/steadq-bench
[ -x "$BENCH" ] || die "$BENCH missing: cargo build --release -p steadq-bench"
for t in qemu-system-x86_64 busybox redis-server dmsetup mkfs.ext4 mkfs.f2fs mkfs.xfs cpio; do
  command -v $t >/dev/null || die "$t not installed"
done

# ---- kernel (the crash rig's), plus dm-mod and dm-delay ----------------------------------------
HERE=$REPO/crashlab
# shellcheck source=../crashlab/guest/kernel.sh
. "$HERE/guest/kernel.sh"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
crashlab_kernel "$CACHE"
DM=$CACHE/flash-dm-$KVER-$KDEBVER
if [ ! -f "$DM/ready" ]; then
  log "fetching dm-mod and dm-delay from $KPKG $KDEBVER"
  rm -rf "$DM.tmp"; mkdir -p "$DM.tmp/mods"
  (cd "$DM.tmp" && apt-get download -q "$KPKG=$KDEBVER" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  dpkg -x "$DM.tmp"/"${KPKG}"_*.deb "$DM.tmp/x"
  depmod -b "$DM.tmp/x" "$KVER"
  modprobe -d "$DM.tmp/x" -S "$KVER" --show-depends dm-delay | awk '/^insmod/{print $2}' | while read -r ko; do
    cp "$ko" "$DM.tmp/mods/"; basename "$ko" .ko >> "$DM.tmp/mods/dm.order"
  done
  rm -rf "$DM.tmp/x" "$DM.tmp"/*.deb
  touch "$DM.tmp/ready"; rm -rf "$DM"; mv "$DM.tmp" "$DM"
fi
flock -u 9

# ---- initramfs: busybox, init, modules, the bench and its tools with their libraries ----------
R=$(mktemp -d)
WORK=$(mktemp -d "$TARGET_DIR/flash-work.XXXXXX")
cleanup() {
  [ -n "${QPID:-}" ] && kill "$QPID" 2>/dev/null || true
  mountpoint -q "$WORK/o" 2>/dev/null && umount "$WORK/o"
  rm -rf "$R" "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$R/bin" "$R/sbin" "$R/mods" "$R/etc"
cp "$(command -v busybox)" "$R/bin/busybox"
cp "$REPO/bench/flash/init" "$R/init"; chmod 755 "$R/init"
: > "$R/mods/all.order"
for set in common ext4 f2fs xfs; do
  while read -r m; do
    grep -qx "$m" "$R/mods/all.order" && continue
    cp "$KDIR/mods/$m.ko" "$R/mods/"; echo "$m" >> "$R/mods/all.order"
  done < "$KDIR/mods/$set.order"
done
while read -r m; do cp "$DM/mods/$m.ko" "$R/mods/"; echo "$m" >> "$R/mods/all.order"; done < "$DM/mods/dm.order"
cp "$BENCH" "$R/steadq-bench"
for t in redis-server dmsetup mkfs.ext4 mkfs.f2fs mkfs.xfs; do cp "$(command -v $t)" "$R/sbin/$t"; done
cp /etc/mke2fs.conf "$R/etc/" 2>/dev/null || true
# shared libraries, at the paths the dynamic loader looks them up at
for b in "$R/steadq-bench" "$R"/sbin/*; do
  ldd "$b" | awk '/=> \//{print $3} /^\t\/lib/{print $1}'
done | sort -u | while read -r lib; do
  mkdir -p "$R$(dirname "$lib")"; cp -L "$lib" "$R$lib"
done
INITRD=$WORK/initrd.gz
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD"

# ---- disks: the one under test (sparse) and an ext4 one for the results ------------------------
truncate -s "${GIB}G" "$WORK/test.img"
truncate -s 64M "$WORK/out.img"; mkfs.ext4 -q -F "$WORK/out.img"
# TCG by default, as the crash rig: nested KVM under this machine's hypervisor stops after the
# kernel's decompression. FLASH_ACCEL=kvm where KVM works.
ACCEL=${FLASH_ACCEL:-tcg}
CPU="-cpu max"; [ "$ACCEL" = kvm ] && CPU="-cpu host"
ARGS_JOINED=$(IFS='~'; echo "${BENCH_ARGS[*]}")   # the guest turns ~ back into spaces
log "profiles=$PROFILES delay=${DELAY}ms disk=${GIB}GiB cpus=$CPUS accel=$ACCEL bench: ${BENCH_ARGS[*]}"
mkdir -p "$OUT"
qemu-system-x86_64 -accel $ACCEL $CPU -smp "$CPUS" -m 3072 -nographic -no-reboot \
  -kernel "$KDIR/vmlinuz" -initrd "$INITRD" \
  -append "console=ttyS0 quiet panic=-1 flash.profiles=$PROFILES flash.delay=$DELAY flash.args=$ARGS_JOINED" \
  -drive "file=$WORK/test.img,format=raw,if=virtio,cache=writeback" \
  -drive "file=$WORK/out.img,format=raw,if=virtio,cache=writeback" \
  < /dev/null > "$OUT/console.log" 2>&1 &
QPID=$!
wait $QPID || true
QPID=
grep -q FLASH_END "$OUT/console.log" || log "the guest did not finish: see $OUT/console.log"
mkdir -p "$WORK/o"; mount -o loop,ro "$WORK/out.img" "$WORK/o"
cp -r "$WORK/o"/. "$OUT/"; rm -rf "$OUT/lost+found"
umount "$WORK/o"
log "results in $OUT"
