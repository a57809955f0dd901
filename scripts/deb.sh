#!/usr/bin/env bash
# scripts/deb.sh [TRIPLE...]: Debian packages of the static `steadq` binaries that .ci/cross
# built, with cargo-deb (Cargo.toml's [package.metadata.deb]). Default triples and packages:
#   x86_64-unknown-linux-musl     amd64  (release profile)
#   aarch64-unknown-linux-musl    arm64  (appliance profile: the Pi binary under its size limit)
#   arm-unknown-linux-musleabihf  armhf  (appliance profile; ARMv6 code, so it runs on every
#                                         32-bit Pi, Zero and 1 included, as Raspberry Pi OS's
#                                         armhf does)
# Each package holds the binary, the man page (scripts/man.sh: the help texts), the bash, zsh
# and fish completions (`steadq completions` of this host's default build: the arm64 binary
# leaves that subcommand and `bench` out, its package still carries the scripts), the systemd
# template units with the binary at /usr/bin, and the operations and security guides.
# Writes target/debian/steadq_<version>-1_<arch>.deb and lists each one's files.
# Needs groff (man.sh's check); installs cargo-deb (pinned) when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T=${CARGO_TARGET_DIR:-target}
CARGO_DEB_VERSION=3.6.0
triples=("$@")
[ ${#triples[@]} -gt 0 ] || triples=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl arm-unknown-linux-musleabihf)

if ! cargo deb --version 2>/dev/null | grep -q " $CARGO_DEB_VERSION\$"; then
  cargo install -q --locked "cargo-deb@$CARGO_DEB_VERSION"
fi

# The assets every package shares (Cargo.toml names them under target/deb-assets/).
A=target/deb-assets
rm -rf "$A"; mkdir -p "$A/systemd"
page=$(scripts/man.sh)
gzip -9n < "$page" > "$A/steadq.1.gz"
cargo build -q --release --bin steadq
for sh in bash zsh fish; do "$T/release/steadq" completions "$sh" > "$A/steadq.$sh"; done
mv "$A/steadq.zsh" "$A/_steadq"
for u in systemd/*.service systemd/*.timer; do
  sed 's|/usr/local/bin/steadq|/usr/bin/steadq|g' "$u" > "$A/systemd/$(basename "$u")"
done

mkdir -p "$T/debian"
for t in "${triples[@]}"; do
  case $t in x86_64-*) prof=release ;; *) prof=appliance ;; esac
  bin=$T/$t/$prof/steadq
  [ -x "$bin" ] || { echo "deb.sh: $bin is missing: run .ci/cross first" >&2; exit 1; }
  deb=$(cargo deb -p steadq-cli --no-build --no-strip --target "$t" --profile "$prof" \
        -o "$T/debian/" 2>/dev/null | tail -1)
  [ -f "$deb" ] || { echo "deb.sh: cargo deb made no package for $t" >&2; exit 1; }
  echo "== $deb ($(stat -c %s "$deb") bytes)"
  dpkg-deb -f "$deb" Package Version Architecture Depends Installed-Size
  dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print "  " $3 "  " $6}'
done
