#!/usr/bin/env bash
# Let this x86_64 machine run arm64 (aarch64) binaries, so the test bed can boot arm64 systemd
# "hosts" like the GB10 Sparks: qemu-user-static registers itself with binfmt_misc, and the
# kernel then runs any aarch64 ELF (including a container's /sbin/init) through qemu.
#
# Idempotent: installs only what is missing, mounts binfmt_misc only when it is not mounted.
# Verifies the registration (enabled, F flag, interpreter present). Run as root.
set -euo pipefail

say() { echo "enable-binfmt: $*"; }
die() {
  echo "enable-binfmt: ERROR: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (apt and binfmt_misc need it); run it with sudo"
export DEBIAN_FRONTEND=noninteractive
binfmt=/proc/sys/fs/binfmt_misc

if [ "$(uname -m)" = aarch64 ]; then
  say "this machine is aarch64 already: nothing to do"
  exit 0
fi

missing=()
for pkg in qemu-user-static binfmt-support; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "qemu-user-static and binfmt-support present"
fi

if [ ! -f "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt" ||
    die "cannot mount binfmt_misc on $binfmt; on a container host, enable it on the host instead"
  say "mounted binfmt_misc on $binfmt"
fi

if [ "$(head -n 1 "$binfmt/qemu-aarch64" 2>/dev/null)" = enabled ]; then
  say "qemu-aarch64 already enabled"
else
  update-binfmts --enable qemu-aarch64
  say "enabled qemu-aarch64"
fi

# The F (fix-binary) flag makes the kernel open the interpreter at registration time, so it
# also works inside containers whose root file system has no qemu binary.
grep -q '^flags: .*F' "$binfmt/qemu-aarch64" ||
  die "qemu-aarch64 is registered without the F flag, so arm64 containers cannot start; run 'update-binfmts --disable qemu-aarch64' and rerun this script"

# Verify what the kernel will use; the arm64 base image build then runs `uname -m` through it.
interp=$(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64")
[ -x "$interp" ] || die "binfmt names interpreter '$interp' but it is not executable; reinstall qemu-user-static"
say "binfmt ready: qemu-aarch64 $(head -n 1 "$binfmt/qemu-aarch64"), interpreter $interp"
