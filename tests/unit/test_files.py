"""sparkops.files: the one writer of private files (0600, atomic) every module goes through."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from sparkops import files


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask():
    """A umask that would leave every new file world-readable."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_write_atomic_is_owner_only_whatever_the_umask(tmp_path, open_umask):
    path = tmp_path / "report.md"
    files.write_atomic(path, "patient text\n")
    assert path.read_text() == "patient text\n"
    assert mode_of(path) == 0o600


def test_write_atomic_narrows_an_older_wider_file(tmp_path, open_umask):
    path = tmp_path / "report.json"
    path.write_text("{}")
    path.chmod(0o644)
    files.write_atomic(path, b'{"v": 2}', durable=True)
    assert path.read_bytes() == b'{"v": 2}'
    assert mode_of(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_write_atomic_keeps_an_explicit_mode(tmp_path, open_umask):
    path = tmp_path / "compose.yml"
    files.write_atomic(path, "services: {}\n", mode=0o644)
    assert mode_of(path) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "servers.json"
    files.write_atomic(path, "old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        files.write_atomic(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["servers.json"]


def test_open_private_appends_and_narrows(tmp_path, open_umask):
    path = tmp_path / "vllm.log"
    path.write_text("first\n")
    path.chmod(0o666)
    fd = files.open_private(path, os.O_WRONLY | os.O_APPEND)
    with os.fdopen(fd, "a") as fh:
        fh.write("second\n")
    assert path.read_text() == "first\nsecond\n"
    assert mode_of(path) == 0o600


def test_write_figure_is_a_private_png(tmp_path, open_umask):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    path = tmp_path / "plot.png"
    try:
        files.write_figure(path, fig)
    finally:
        plt.close(fig)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert mode_of(path) == 0o600


def test_no_module_writes_private_files_its_own_way():
    """One writer: a file created with os.open/mkstemp or a figure saved outside files.py
    would be a second way to get the mode (or atomicity) wrong."""
    src = Path(files.__file__).parent
    patterns = ("O_CREAT", "mkstemp", "savefig(", "fchmod")
    offenders = [
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if path.name != "files.py" and any(p in path.read_text() for p in patterns)
    ]
    assert offenders == []
