"""scripts/testbed/rootfs-unmount.sh: nothing mounted is left in a rootfs before it is packed.

`make testbed` once failed on a fresh machine: debootstrap left ./proc mounted in the arm64
root and tar read it ("File removed before we read it"). build-base-image.sh now runs this
script before tar (and packs with --one-file-system); here it meets the same mounts for real
(proc, and nested tmpfs as debootstrap's dev and dev/pts), as root like `make testbed`.
"""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.infra, pytest.mark.timeout(120)]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "testbed" / "rootfs-unmount.sh"


def mounts_under(root: Path) -> list[str]:
    targets = subprocess.run(
        ["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True, check=True
    ).stdout.split()
    return [t for t in targets if t.startswith(f"{root}/")]


def test_unmounts_proc_and_nested_mounts_so_tar_packs_only_the_root(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    for sub in ("proc", "dev", "etc"):
        (root / sub).mkdir(parents=True)
    (root / "etc" / "hostname").write_text("testhost\n")
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "dev")], check=True)
    (root / "dev" / "pts").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "dev" / "pts")], check=True)
    try:
        assert len(mounts_under(root)) == 3
        result = subprocess.run(
            [str(SCRIPT), str(root)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert mounts_under(root) == []
    finally:
        for target in sorted(mounts_under(root), reverse=True):
            subprocess.run(["umount", "-l", target], check=False)
    archive = tmp_path / "root.tar"
    subprocess.run(
        ["tar", "-C", str(root), "--one-file-system", "-cf", str(archive), "."], check=True
    )
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "./etc/hostname" in names
    assert not [n for n in names if n.startswith("./proc/")], names[:20]


def test_refuses_a_missing_directory_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT), str(tmp_path / "absent")], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert result.stderr.startswith("rootfs-unmount: usage:")
    assert len(result.stderr.strip().splitlines()) == 1
