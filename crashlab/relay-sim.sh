#!/bin/bash
# crashlab relay check: the power-cut rig's relay (crashlab/src/relay.rs, driven by
# src/bin/relaycheck.rs) against the kernel's simulated GPIO chip, with libgpiod v1 and v2.
#
#   relay-sim.sh
#
# A fresh Debian 12 host, as root. Fetches Debian's guest kernel (guest/kernel.sh, shared with
# the other rigs). Debian builds its kernels without CONFIG_GPIO_SIM, so this script builds
# gpio-sim.ko out of tree from the same kernel version's linux-source and headers (with the
# kernel's irq_sim.c, which nothing else in Debian's config selects). libgpiod v1 is
# bookworm's `gpiod`, v2 trixie's (with trixie's glibc beside it: it needs glibc 2.38), each
# run through its own loader. Boots the guest (guest/init, crashlab.mode=relay), which runs
# guest/relay-test.sh: power on, a cut, a restore, a normal end, an error exit, Ctrl-C and
# SIGKILL mid-cut, each read back from the line. Exit 0 only when every check passed.
# Knobs: CRASHLAB_CACHE=/var/cache/crashlab, CRASHLAB_SKIP_APT=1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$REPO/crashlab
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
CACHE=${CRASHLAB_CACHE:-/var/cache/crashlab}
MUSL=x86_64-unknown-linux-musl
TRIXIE=http://deb.debian.org/debian
log() { echo "relay-sim: $*" >&2; }
die() { echo "relay-sim: ERROR: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root (apt)"
T0=$(date +%s)

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
# shellcheck source=guest/packages.sh
. "$HERE/guest/packages.sh"
crashlab_packages qemu-system-x86 busybox-static cpio kmod make curl xz-utils
# shellcheck source=guest/kernel.sh
. "$HERE/guest/kernel.sh"
crashlab_kernel "$CACHE"

# ---- gpio-sim.ko for this kernel -----------------------------------------------------------
SIM=$CACHE/gpio-sim-$KVER-$KDEBVER.ko
if [ ! -f "$SIM" ]; then
  crashlab_packages "linux-headers-$KVER"
  SRCPKG=linux-source-$(echo "$KVER" | cut -d. -f1,2)
  B=$(mktemp -d)
  log "building gpio-sim.ko from $SRCPKG $KDEBVER"
  (cd "$B" && apt-get download -q "$SRCPKG=$KDEBVER" 2>&1 | grep -v 'unsandboxed' || true)
  dpkg --fsys-tarfile "$B"/"$SRCPKG"_*.deb | tar -xO "./usr/src/$SRCPKG.tar.xz" |
    xz -dc | tar -x -C "$B" "$SRCPKG/drivers/gpio/gpio-sim.c" "$SRCPKG/drivers/gpio/gpiolib.h" \
      "$SRCPKG/kernel/irq/irq_sim.c"
  mkdir "$B/m"
  cp "$B/$SRCPKG/drivers/gpio/gpio-sim.c" "$B/m/gpio-sim-main.c"
  cp "$B/$SRCPKG/drivers/gpio/gpiolib.h" "$B/$SRCPKG/kernel/irq/irq_sim.c" "$B/m/"
  # irq_to_desc is not exported to modules; generic_handle_irq reaches the same handler.
  sed -i 's/handle_simple_irq(irq_to_desc(irqnum));/generic_handle_irq(irqnum);/' "$B/m/irq_sim.c"
  printf 'obj-m := gpio-sim.o\ngpio-sim-y := gpio-sim-main.o irq_sim.o\n' > "$B/m/Makefile"
  make -s -C "/usr/src/linux-headers-$KVER" M="$B/m" modules 2>&1 | grep -v 'Skipping BTF' || true
  [ -f "$B/m/gpio-sim.ko" ] || die "gpio-sim.ko did not build"
  cp "$B/m/gpio-sim.ko" "$SIM.tmp" && mv "$SIM.tmp" "$SIM"
  rm -rf "$B"
fi

# ---- libgpiod v1 (bookworm) and v2 (trixie), each with its own loader -------------------------
GPIOD=$CACHE/gpiod
if [ ! -f "$GPIOD/ready" ]; then
  rm -rf "$GPIOD"; mkdir -p "$GPIOD/dl" "$GPIOD/v1" "$GPIOD/v2"
  (cd "$GPIOD/dl" && apt-get download -q gpiod libgpiod2 2>&1 | grep -v 'unsandboxed' || true)
  curl -fsS "$TRIXIE/dists/trixie/main/binary-amd64/Packages.xz" | xz -dc > "$GPIOD/dl/Packages"
  for p in gpiod libgpiod3 libc6; do
    f=$(awk -v p="$p" '$1=="Package:"{x=($2==p)} x&&$1=="Filename:"{print $2; exit}' "$GPIOD/dl/Packages")
    [ -n "$f" ] || die "trixie has no $p"
    curl -fsS "$TRIXIE/$f" -o "$GPIOD/dl/trixie-$(basename "$f")"
  done
  for d in "$GPIOD"/dl/*.deb; do dpkg -x "$d" "$GPIOD/x-$(basename "$d" .deb)"; done
  one() { find "$GPIOD"/x-"$1"* -name "$2" | head -1; }
  cp "$(one gpiod_1 gpioset)" "$GPIOD/v1/gpioset.bin"; cp -L "$(one libgpiod2 libgpiod.so.2)" "$GPIOD/v1/"
  cp -L /lib/x86_64-linux-gnu/libc.so.6 /lib64/ld-linux-x86-64.so.2 "$GPIOD/v1/"
  cp "$(one trixie-gpiod gpioset)" "$GPIOD/v2/gpioset.bin"; cp -L "$(one trixie-libgpiod3 libgpiod.so.3)" "$GPIOD/v2/"
  cp -L "$(one trixie-libc6 libc.so.6)" "$(one trixie-libc6 ld-linux-x86-64.so.2)" "$GPIOD/v2/"
  for v in v1 v2; do
    printf '#!/bin/sh\nexec /gpiod/%s/ld-linux-x86-64.so.2 --library-path /gpiod/%s /gpiod/%s/gpioset.bin "$@"\n' \
      "$v" "$v" "$v" > "$GPIOD/$v/gpioset"
    chmod 755 "$GPIOD/$v/gpioset"
  done
  rm -rf "$GPIOD/dl" "$GPIOD"/x-*
  touch "$GPIOD/ready"
fi
flock -u 9

# ---- the controller's relay, static, and the initramfs ---------------------------------------
rustup target list --installed 2>/dev/null | grep -qx $MUSL || rustup target add $MUSL
(cd "$REPO" && cargo build -q --release -p crashlab --target $MUSL --bin relaycheck)
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
mkdir -p "$R/bin" "$R/mods" "$R/gpiod"
cp /bin/busybox "$R/bin/busybox"
cp "$HERE/guest/init" "$R/init"; cp "$HERE/guest/relay-test.sh" "$R/relay-test.sh"
chmod 755 "$R/init" "$R/relay-test.sh"
cp "$TARGET_DIR/$MUSL/release/relaycheck" "$R/relaycheck"
cp "$REPO/boards/pi-4.toml" "$R/board.toml"
cp -r "$GPIOD/v1" "$GPIOD/v2" "$R/gpiod/"
cp "$KDIR/mods/gpio.order" "$R/mods/"
while read -r m; do cp "$KDIR/mods/$m.ko" "$R/mods/"; done < "$KDIR/mods/gpio.order"
cp "$SIM" "$R/mods/gpio-sim.ko"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$R.initrd"
trap 'rm -rf "$R" "$R.initrd"' EXIT
log "kernel $KPKG $KDEBVER; setup $(( $(date +%s) - T0 ))s"

# ---- boot and read the checks ----------------------------------------------------------------
OUT=$(timeout -k 5 300 qemu-system-x86_64 -accel tcg -cpu max -m 512 -smp 1 -nographic -no-reboot \
  -net none -kernel "$KDIR/vmlinuz" -initrd "$R.initrd" \
  -append "console=ttyS0 panic=-1 quiet crashlab.mode=relay" 2>&1 | tr -d '\r') || true
echo "$OUT" | grep '^CRASHLAB_RELAY' || true
echo "$OUT" | grep -q '^CRASHLAB_RELAY_RC=0$' || {
  echo "$OUT" | grep -v '^CRASHLAB_RELAY' | tail -20 >&2
  die "the relay check failed (see the lines above)"
}
n_ok=$(echo "$OUT" | grep -c '^CRASHLAB_RELAY ver=.* ok$' || true)
vers=$(echo "$OUT" | sed -n 's/^CRASHLAB_RELAY ver=\([^ ]*\) using .*/\1/p' | tr '\n' ' ')
[ "$(echo "$vers" | wc -w)" = 2 ] || die "expected libgpiod v1 and v2, ran: $vers"
log "relay: $n_ok checks passed with libgpiod $vers in $(( $(date +%s) - T0 ))s"
