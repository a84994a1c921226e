# Installs those of the given Debian packages that are not installed yet (sourced by setup.sh,
# fresh-root.sh and arm64-check.sh), through sudo when not root; prints "WHO: installing ..."
# first. A package dpkg knows but has removed (only its configuration left) counts as missing.
# usage: source scripts/lib/debian_packages.sh; install_missing_packages WHO PACKAGE...
install_missing_packages() {
  local who=$1 package sudo=""
  shift
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  echo "$who: installing ${missing[*]}"
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
