#!/usr/bin/env python3
"""Which mount holds a path, and can the path be written? (container_runtime, issue 43 item 7)

Usage: mount-of.py PATH  ->  one JSON object on stdout.

The role refuses a read-only /etc/docker before any change and names the mount to remount.
Walking up with os.path.ismount found the wrong one for a bind mount of a folder of the same
filesystem (`mount --bind /srv/etc-docker /etc/docker`, then read-only): ismount compares
device numbers, which a same-filesystem bind mount shares with its parent, so the walk ended
at / and the advice was `mount -o remount,rw /`. The kernel's own table,
/proc/self/mountinfo, names every mount point, bind mounts included: the mount holding a path
is the last-mounted entry whose mount point is the path's longest leading folder.

Standard library only: the host's python3 runs it (check mode too); it only reads.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass

MOUNTINFO = "/proc/self/mountinfo"
_ESCAPED = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo (proc(5)): where, what of which filesystem, and its flags."""

    mount_point: str
    root: str  # the folder of the filesystem mounted there ("/" unless a bind mount of a part)
    fstype: str
    source: str
    mount_options: tuple[str, ...]  # this mount's own flags (a bind mount's ro lives here)
    super_options: tuple[str, ...]  # the filesystem's flags (shared by all its mounts)

    @property
    def read_only(self) -> str:
        """ "filesystem" (the whole filesystem is read-only), "mount" (only this mount, as a
        read-only bind mount is) or "" (writable)."""
        if "ro" in self.super_options:
            return "filesystem"
        return "mount" if "ro" in self.mount_options else ""

    @property
    def remount(self) -> str:
        """The command that makes this mount writable."""
        how = "remount,bind,rw" if self.read_only == "mount" else "remount,rw"
        return f"mount -o {how} {shlex.quote(self.mount_point)}"


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040 ...)."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> list[Mount]:
    """Every mount of a mountinfo text, in the kernel's order (later mounts over earlier)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        tail = fields.index("-", 6)
        fstype, source, supers = [*fields[tail + 1 : tail + 4], "", "", ""][:3]
        mounts.append(
            Mount(
                mount_point=_unescape(fields[4]),
                root=_unescape(fields[3]),
                fstype=fstype,
                source=_unescape(source),
                mount_options=tuple(fields[5].split(",")),
                super_options=tuple(supers.split(",")),
            )
        )
    return mounts


def _within(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point + "/")


def holding(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount that holds `path` (absolute, links resolved): the longest mount point it is
    under, the last mounted where several share it."""
    best: Mount | None = None
    for mount in mounts:
        if _within(path, mount.mount_point) and (
            best is None or len(mount.mount_point) >= len(best.mount_point)
        ):
            best = mount
    return best


def existing_folder(path: str) -> str:
    """The folder a file at `path` goes in (links resolved), or its nearest existing parent."""
    folder = os.path.dirname(os.path.realpath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    return folder


def main(argv: list[str]) -> int:
    folder = existing_folder(argv[1])
    with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as handle:
        mount = holding(folder, parse(handle.read()))
    answer: dict[str, object] = {"folder": folder, "writable": os.access(folder, os.W_OK)}
    if mount is not None:
        answer.update(asdict(mount), read_only=mount.read_only, remount=mount.remount)
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
