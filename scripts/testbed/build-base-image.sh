#!/usr/bin/env bash
# Build the systemd "host" image the infra tests boot: Debian bookworm, minbase + the packages in
# base-image.packages, for amd64 or arm64 (the GB10 Sparks are arm64; binfmt runs it emulated).
#
# No container registry is reachable on the CI machines, so nothing is pulled: debootstrap makes
# the root file system (with its default mirror: the repository names none) and `docker import`
# turns it into an image. The tag carries a key (hash of the package list and this script), so a
# change to either builds a new image, and an image that exists is never rebuilt. The rootfs
# tarball is kept under $SPARKOPS_CACHE/images: a wiped engine re-imports it without debootstrap.
#
# Usage: build-base-image.sh amd64|arm64     Prints the image reference last.
# Env:   SPARKOPS_CACHE (default .cache next to the Makefile). Run as root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SPARKOPS_CACHE:-$repo/.cache}
suite=bookworm
repository=sparkops/testhost

say() { echo "build-base-image: $*"; }
die() {
  echo "build-base-image: ERROR: $*" >&2
  exit 1
}

arch=${1:-}
case "$arch" in
  amd64 | arm64) ;;
  *) die "usage: $0 amd64|arm64 (got '${arch}')" ;;
esac
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap needs it); run it with sudo"
docker info >/dev/null 2>&1 || die "no Docker engine answers; run scripts/testbed/install-docker.sh first"

# The key: tests/plugins/hosts.py computes the same (sha256 of these files, in this order).
key=$(cat "$here/base-image.packages" "$here/build-base-image.sh" "$here/rootfs-unmount.sh" |
  sha256sum | cut -c1-12)
image=$repository:$suite-$arch-$key
alias_ref=$repository:$suite-$arch
tarball=$cache/images/testhost-$suite-$arch-$key.tar

if docker image inspect "$image" >/dev/null 2>&1; then
  docker tag "$image" "$alias_ref"
  say "image present: $image"
  echo "$image"
  exit 0
fi

if [ ! -s "$tarball" ]; then
  if [ "$arch" = arm64 ] && [ "$(uname -m)" != aarch64 ] &&
    [ "$(head -n 1 /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null)" != enabled ]; then
    die "arm64 on $(uname -m) needs qemu binfmt; run scripts/testbed/enable-binfmt.sh first"
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  fi
  packages=$(grep -v -e '^#' -e '^[[:space:]]*$' "$here/base-image.packages" | paste -sd, -)
  mkdir -p "$cache/images"
  root=$(mktemp -d "$cache/images/rootfs-$arch.XXXXXX")
  cleanup() {
    # debootstrap may leave proc/sys mounted in the rootfs: unmount before removing.
    "$here/rootfs-unmount.sh" "$root" || true
    rm -rf --one-file-system "$root" "$tarball.part"
  }
  trap cleanup EXIT
  say "debootstrap $suite $arch (--variant=minbase --include=$packages): amd64 ~1 min, arm64 ~3 min"
  debootstrap --arch="$arch" --variant=minbase --include="$packages" "$suite" "$root" \
    >"$cache/images/debootstrap-$arch.log" 2>&1 ||
    die "debootstrap failed; read $cache/images/debootstrap-$arch.log and $root/debootstrap/debootstrap.log"

  # What systemd needs to boot as PID 1 in a container:
  # - an empty machine-id: systemd makes a fresh one at each boot, so no two hosts share one;
  # - no login prompts (gettys spin on a container's console) and no first-boot wizard;
  # - no units that need devices or kernel access a container does not have.
  : >"$root/etc/machine-id"
  rm -f "$root/var/lib/dbus/machine-id"
  for unit in getty@.service serial-getty@.service console-getty.service getty.target \
    systemd-firstboot.service systemd-udevd.service systemd-modules-load.service \
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
  done
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root/debootstrap"
  # Nothing may be mounted in the root when it is packed (debootstrap can leave proc, sys and
  # dev/pts mounted); --one-file-system keeps anything mounted later out of the image too.
  "$here/rootfs-unmount.sh" "$root" || die "cannot unmount what debootstrap left under $root"
  tar -C "$root" --numeric-owner --one-file-system -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  # Older builds of this arch are dead weight now.
  find "$cache/images" -maxdepth 1 -name "testhost-$suite-$arch-*.tar" ! -name "$(basename "$tarball")" -delete
  say "rootfs cached: $tarball ($(du -h "$tarball" | cut -f1))"
else
  say "rootfs cached: $tarball: importing without debootstrap"
fi

docker import \
  --platform "linux/$arch" \
  --change 'ENV container=docker' \
  --change 'CMD ["/sbin/init"]' \
  --message "sparkops test host $suite $arch ($key)" \
  "$tarball" "$image" >/dev/null
docker tag "$image" "$alias_ref"
say "imported $image"
echo "$image"
