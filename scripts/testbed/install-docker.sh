#!/usr/bin/env bash
# Give this machine a running Docker engine with compose v2, for the infra tests and the demo.
#
# Debian 12 ships engine 20.10 (`docker.io`) but only compose v1; the `docker-compose` package of
# Debian 13 (trixie, 2.26) installs as a CLI plugin and works with that engine. We fetch it from an
# extra apt source for trixie DERIVED from the machine's own apt sources (same URIs and keyring,
# other suite), pinned low so nothing else moves to trixie: the repository names no mirror.
# No systemd runs on the CI machines, so dockerd is started in the background when none answers
# (through docker.service where systemd runs). Releases that package compose v2 use their own.
#
# Idempotent: each step is skipped when its result is already there. Run as root.
# Env: SPARKOPS_CACHE (default .cache next to the Makefile): dockerd's log goes to
#      $SPARKOPS_CACHE/testbed/dockerd.log.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPARKOPS_CACHE:-$here/.cache}
compose_suite=trixie
source_file=/etc/apt/sources.list.d/sparkops-$compose_suite.sources
pin_file=/etc/apt/preferences.d/sparkops-$compose_suite
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"')

say() { echo "install-docker: $*"; }
die() {
  echo "install-docker: ERROR: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (the engine and apt need it); run it with sudo"
export DEBIAN_FRONTEND=noninteractive

# --- engine ------------------------------------------------------------------------------------
# A `docker` client alone (some images carry one under /usr/local/bin) is not an engine: look
# for dockerd. docker.io puts its own 20.10 client in /usr/bin; a newer client earlier on PATH
# keeps working against it (API negotiation), so we leave it alone.
if command -v dockerd >/dev/null 2>&1; then
  say "engine present: $(dockerd --version)"
else
  say "no engine: installing docker.io from $codename"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  say "installed $(dockerd --version)"
fi

# --- compose v2 --------------------------------------------------------------------------------
have_compose_v2() { docker compose version --short 2>/dev/null | grep -q '^v\?2\.'; }

# Print a deb822 source for $compose_suite built from the machine's own source for its release:
# same URIs, components and Signed-By, only the suite replaced.
derive_source() {
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    awk -v want="$codename" -v suite="$compose_suite" 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; uris = ""; suites = ""; signed = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:/) types = $i
          else if ($i ~ /^URIs:/) uris = $i
          else if ($i ~ /^Suites:/) suites = $i
          else if ($i ~ /^Signed-By:/) signed = $i
        }
        if (types ~ /[ \t]deb([ \t]|$)/ && (" " suites " ") ~ ("[ \t]" want "[ \t]")) {
          print "Types: deb"; print uris; print "Suites: " suite; print "Components: main"
          if (signed != "") print signed
          found = 1; exit
        }
      }
      END { if (!found) exit 1 }' /etc/apt/sources.list.d/debian.sources
  elif [ -f /etc/apt/sources.list ]; then
    awk -v want="$codename" -v suite="$compose_suite" '
      $1 == "deb" {
        i = 2; opts = ""
        if ($2 ~ /^\[/) { while ($i !~ /\]$/) { opts = opts " " $i; i++ }; opts = opts " " $i; i++ }
        if ($(i + 1) == want) {
          signed = ""
          if (match(opts, /signed-by=[^] ]+/)) signed = substr(opts, RSTART + 10, RLENGTH - 10)
          print "Types: deb"; print "URIs: " $i; print "Suites: " suite; print "Components: main"
          if (signed != "") print "Signed-By: " signed
          found = 1; exit
        }
      }
      END { if (!found) exit 1 }' /etc/apt/sources.list
  else
    return 1
  fi
}

# Version apt would install for a package, from the lists as they are.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { print $2 }'; }

if have_compose_v2; then
  say "compose present: $(docker compose version)"
else
  # Newer releases (Debian 13, Ubuntu's docker-compose-v2) carry compose v2 themselves.
  pkg=""
  for name in docker-compose-v2 docker-compose; do
    case "$(candidate "$name")" in 2.*) pkg=$name && break ;; esac
  done
  if [ -z "$pkg" ]; then
    if [ ! -f "$source_file" ]; then
      src=$(derive_source) || die "found no Debian source for this release in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list; add one (or install the compose v2 CLI plugin by hand) and rerun"
      {
        echo "# Written by sparkops scripts/testbed/install-docker.sh: compose v2 (docker-compose) only."
        echo "$src"
      } >"$source_file"
      say "added apt source $source_file (derived from this machine's sources)"
    fi
    if [ ! -f "$pin_file" ]; then
      cat >"$pin_file" <<EOF
# Written by sparkops scripts/testbed/install-docker.sh: nothing comes from $compose_suite
# unless asked for by name; docker-compose follows $compose_suite once installed from it.
Package: *
Pin: release n=$compose_suite
Pin-Priority: 100

Package: docker-compose
Pin: release n=$compose_suite
Pin-Priority: 600
EOF
      say "pinned $compose_suite low ($pin_file)"
    fi
    apt-get update -qq
    pkg=docker-compose/$compose_suite
  fi
  apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
  have_compose_v2 || die "$pkg installed but 'docker compose version' is not v2; check 'dpkg -L ${pkg%%/*}' for the CLI plugin"
  say "installed $(docker compose version) ($pkg)"
fi

# --- daemon ------------------------------------------------------------------------------------
if docker info >/dev/null 2>&1; then
  say "engine answers: server $(docker version --format '{{.Server.Version}}')"
  exit 0
fi
if [ -d /run/systemd/system ]; then
  # A machine booted with systemd (a workstation): let it own the daemon.
  say "starting docker.service"
  systemctl start docker.service
else
  mkdir -p "$cache/testbed"
  log=$cache/testbed/dockerd.log
  say "starting dockerd in the background (log $log)"
  # setsid: the daemon must outlive this script and the make/CI step that ran it.
  setsid dockerd >>"$log" 2>&1 </dev/null &
fi
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    say "engine answers: server $(docker version --format '{{.Server.Version}}'), storage $(docker info --format '{{.Driver}}')"
    exit 0
  fi
  sleep 1
done
[ -n "${log:-}" ] && tail -n 20 "$log" >&2
die "dockerd did not answer within 60 s; read ${log:-journalctl -u docker.service}"
