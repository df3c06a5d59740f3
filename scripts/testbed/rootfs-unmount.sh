#!/usr/bin/env bash
# Unmount everything mounted under a root file system being built, deepest first, and verify
# that nothing remains. debootstrap mounts proc, sys and dev/pts inside the rootfs and can leave
# them mounted (on failure, and once on a fresh machine after success); `tar` of the root then
# read a live ./proc ("File removed before we read it") and `rm -rf` could walk the host's /sys.
#
# Usage: rootfs-unmount.sh DIR    Exit 0 when nothing is mounted under DIR any more; else 1,
#                                 naming what is still mounted. Run as root.
set -euo pipefail

root=${1:-}
[ -n "$root" ] && [ -d "$root" ] || {
  echo "rootfs-unmount: usage: $0 DIR (an existing directory, got '${root}')" >&2
  exit 2
}
root=$(cd "$root" && pwd -P)

# Mount points strictly under the root, deepest first (findmnt -r escapes blanks as \x20).
mounts() { findmnt -rn -o TARGET | awk -v r="$root/" 'index($0, r) == 1' | sort -r; }

for attempt in 1 2 3 4 5; do
  remaining=$(mounts)
  [ -z "$remaining" ] && exit 0
  while read -r target; do
    # A busy mount is detached lazily; the next round verifies it is gone.
    umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
  done <<<"$remaining"
  sleep "$attempt"
done
echo "rootfs-unmount: still mounted under $root: $(mounts | paste -sd' ' -)" >&2
exit 1
