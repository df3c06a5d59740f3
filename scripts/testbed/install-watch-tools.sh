#!/usr/bin/env bash
# The tools the watch tests run for real: Debian's `prometheus` (brings `promtool`, which
# `make test` runs on the kit's alert rules, and the server the scrape test starts) and
# `chromium` with `chromium-driver` (the headless browser the HTML report is opened in).
#
# From the machine's own apt sources (the release's packages; no mirror is named here).
# Idempotent: a package whose command is already on PATH is not installed again; nothing is
# started (the Debian prometheus package would enable its service where systemd runs: we stop
# and disable it again, as the tests start their own server on a free port).
# Run as root.
set -euo pipefail

say() { echo "install-watch-tools: $*"; }
die() {
  echo "install-watch-tools: ERROR: $*" >&2
  exit 1
}

# command -> the Debian package that brings it
declare -A packages=(
  [promtool]=prometheus
  [chromium]=chromium
  [chromedriver]=chromium-driver
)

missing=()
for command in promtool chromium chromedriver; do
  if command -v "$command" >/dev/null 2>&1; then
    say "$command present"
  else
    missing+=("${packages[$command]}")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

[ "$(id -u)" -eq 0 ] || die "must run as root to install ${missing[*]} (apt); run it with sudo"
export DEBIAN_FRONTEND=noninteractive
say "installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet prometheus 2>/dev/null; then
  systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
for command in promtool chromium chromedriver; do
  command -v "$command" >/dev/null 2>&1 || die "$command is still missing after installing"
done
say "installed: $(promtool --version 2>&1 | head -n 1); $(chromium --version)"
