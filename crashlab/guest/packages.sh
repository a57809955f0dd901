# Shared by crashlab/rig.sh and crashlab/powercut.sh (sourced): install the host's missing apt
# packages. Usage: crashlab_packages PKG...; honours CRASHLAB_SKIP_APT=1 (fail instead of
# installing); log and die from the caller.
crashlab_packages() {
  local p missing=
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -n "$missing" ] || return 0
  [ -z "${CRASHLAB_SKIP_APT:-}" ] || die "missing packages:$missing"
  log "installing$missing"
  apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
}
