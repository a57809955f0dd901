# Shared by crashlab/rig.sh and crashlab/powercut.sh (sourced): the guest kernel, Debian's
# current linux-image-amd64 dependency looked up now, unpacked once into CACHE with the insmod
# order of each module set (deps and softdeps first) in mods/<set>.order. Needs apt-get,
# dpkg, depmod and modprobe (kmod); log and die from the caller.
# Sets KPKG, KVER, KDEBVER and KDIR (KDIR/vmlinuz, KDIR/mods/*.ko, KDIR/mods/*.order).
# Sets: common (virtio block), ext4, xfs, btrfs, f2fs, net (virtio-net, for the power-cut agent),
# gpio (configfs, for relay-sim.sh's gpio-sim, which Debian's kernel lacks and relay-sim.sh builds),
# loop (for rig.sh's f2fs check, which loop-mounts each crash state in the guest).
crashlab_kernel() {
  local CACHE=$1
  kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
  KPKG=$(kpkg)
  if [ -z "$KPKG" ]; then apt-get update -qq; KPKG=$(kpkg); fi
  [ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 to a kernel package"
  KVER=${KPKG#linux-image-}
  KDEBVER=$(apt-cache show "$KPKG" | awk '/^Version:/{print $2; exit}')
  KDIR=$CACHE/kernel-$KVER-$KDEBVER-m4   # -m3: module set gpio added; -m4: loop
  if [ ! -f "$KDIR/ready" ]; then
    log "fetching $KPKG $KDEBVER"
    rm -rf "$KDIR" "$KDIR.tmp"; mkdir -p "$KDIR.tmp/mods"
    (cd "$KDIR.tmp" && apt-get download -q "$KPKG=$KDEBVER" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    dpkg -x "$KDIR.tmp"/"${KPKG}"_*.deb "$KDIR.tmp/x"
    depmod -b "$KDIR.tmp/x" "$KVER"
    cp "$KDIR.tmp/x/boot/vmlinuz-$KVER" "$KDIR.tmp/vmlinuz"
    # insmod order for each set, deps and softdeps first (modprobe resolves modules.dep/softdep)
    modset() {
      local out=$1; shift
      local m line ko name
      : > "$KDIR.tmp/mods/$out.order"
      for m in "$@"; do
        modprobe -d "$KDIR.tmp/x" -S "$KVER" --show-depends "$m" | while read -r line; do
          case $line in insmod\ *) ;; *) continue ;; esac
          ko=$(echo "$line" | awk '{print $2}'); name=$(basename "$ko" .ko)
          grep -qx "$name" "$KDIR.tmp/mods/common.order" "$KDIR.tmp/mods/$out.order" && continue
          cp "$ko" "$KDIR.tmp/mods/$name.ko"; echo "$name" >> "$KDIR.tmp/mods/$out.order"
        done
      done
    }
    modset common virtio_pci virtio_blk
    modset ext4 crc32c_generic ext4
    modset xfs crc32c_generic xfs
    modset btrfs crc32c_generic xxhash_generic sha256_generic blake2b_generic btrfs
    modset f2fs crc32_generic crc32c_generic f2fs
    modset net virtio_net
    modset gpio configfs
    modset loop loop
    rm -rf "$KDIR.tmp/x" "$KDIR.tmp"/*.deb
    touch "$KDIR.tmp/ready"
    for old in "$CACHE"/kernel-*; do [ "$old" = "$KDIR.tmp" ] || rm -rf "$old"; done   # older kernels
    mv "$KDIR.tmp" "$KDIR"
  fi
}
