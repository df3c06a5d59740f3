"""The host lock's holder (ansible/playbooks/tasks/host_lock_holder.py, issue 43 item 4), run as
the sparkops_host_lock action runs it, on real flocks in a temporary folder.

A run killed while it waited used to leave an `flock --wait` behind that took the lock when it
came free and held it for the whole grace. The holder now takes the lock only while its run's
heartbeat is fresh, and until the run has seen the lock is its own keeps it only while that
heartbeat stays fresh. tests/infra/test_host_lock_wait.py runs it with real playbooks.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOLDER = REPO / "ansible" / "playbooks" / "tasks" / "host_lock_holder.py"
ACTION_LINK = REPO / "ansible" / "playbooks" / "action_plugins"
RUN = "1234-20261207T070000"


def start(lock: Path, *, wait: float = 60, grace: float = 60, heartbeat: float = 3):
    """The holder for RUN, as the action starts it (heartbeat made first)."""
    Path(f"{lock}.wait.{RUN}").touch()
    return subprocess.Popen(
        [sys.executable, str(HOLDER), str(lock), RUN, "provision.yml started by me", str(wait),
         str(grace), str(heartbeat)],
    )  # fmt: skip


def until(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} within {timeout:.0f} s")


def owner(lock: Path) -> list[str]:
    try:
        return Path(f"{lock}.owner").read_text().splitlines()
    except FileNotFoundError:
        return []


def free(lock: Path) -> bool:
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


@contextmanager
def held_by_another(lock: Path) -> Iterator[None]:
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return tmp_path / "sparkops-host.lock"


def test_a_holder_takes_a_free_lock_for_its_waiting_run_and_lets_go_when_released(lock) -> None:
    holder = start(lock)
    try:
        until(lambda: len(owner(lock)) == 4, "the owner file was never written")
        pid, run, description, taken = owner(lock)
        assert (int(pid), run, description) == (holder.pid, RUN, "provision.yml started by me")
        assert abs(int(taken) - time.time()) < 120 and not free(lock)
        # The run has seen the lock is its own: it removes its heartbeat; renewals keep it.
        os.unlink(f"{lock}.wait.{RUN}")
        time.sleep(4)  # past the heartbeat grace (3 s): held on the owner file's renewals now
        assert holder.poll() is None and not free(lock)
        Path(f"{lock}.owner").unlink()  # tasks/host_unlock.yml
        assert holder.wait(timeout=30) == 0
        assert free(lock)
    finally:
        holder.kill()


def test_a_killed_waiting_run_s_holder_never_takes_the_lock(lock) -> None:
    """Issue 43 item 4: the run waits, is killed (its heartbeat stops), then the lock frees."""
    with held_by_another(lock):
        holder = start(lock, heartbeat=2)
        try:
            assert holder.wait(timeout=30) == 75  # its run went quiet: it gave up waiting
        finally:
            holder.kill()
    assert free(lock) and owner(lock) == []
    assert not Path(f"{lock}.wait.{RUN}").exists()


def test_a_run_that_dies_as_it_gets_the_lock_loses_it_within_the_heartbeat_grace(lock) -> None:
    """Taken while the heartbeat was fresh, never acknowledged: let go, owner file removed."""
    holder = start(lock, heartbeat=3)
    try:
        until(lambda: len(owner(lock)) == 4, "the owner file was never written")
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
    assert free(lock) and owner(lock) == []


def test_a_run_that_gave_up_takes_its_holder_with_it(lock) -> None:
    """The action removes the heartbeat when its wait is over: the holder stops waiting."""
    with held_by_another(lock):
        holder = start(lock, heartbeat=60)
        try:
            time.sleep(1)
            assert holder.poll() is None
            os.unlink(f"{lock}.wait.{RUN}")
            assert holder.wait(timeout=30) == 75
        finally:
            holder.kill()
    assert owner(lock) == []


def test_kill_ends_the_hold_cleanly(lock) -> None:
    """`sudo kill PID`, the fix the refusal names: the lock and the owner file go."""
    holder = start(lock)
    try:
        until(lambda: len(owner(lock)) == 4, "the owner file was never written")
        holder.terminate()
        holder.wait(timeout=30)
    finally:
        holder.kill()
    assert free(lock) and owner(lock) == []


def test_every_kit_playbook_finds_the_lock_action_beside_it() -> None:
    """Ansible loads <playbook dir>/action_plugins (sparkops_host_lock), as it loads the
    callback_plugins and library links there."""
    assert ACTION_LINK.is_symlink() and (ACTION_LINK / "sparkops_host_lock.py").is_file()
    text = (REPO / "ansible" / "playbooks" / "tasks" / "host_lock.yml").read_text()
    assert "sparkops_host_lock:" in text and "until:" not in text


def _round(tmp_path: Path, lock: Path) -> list[str]:
    """One look of the waiting action (sparkops_host_lock's round command) through a shell
    whose `cat` and `sed` stand-ins do their real job, then, the first time either reads the
    owner file by its name, write it as the holder does on taking the lock: the holder's
    write lands between the look's read and whatever the look does next."""
    sys.path.insert(0, str(REPO / "ansible" / "plugins" / "action"))
    try:
        from sparkops_host_lock import round_command
    finally:
        sys.path.pop(0)
    owner_file, bin_dir = f"{lock}.owner", tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("cat", "sed"):
        real = shutil.which(tool)
        (bin_dir / tool).write_text(
            f'#!/bin/sh\n{real} "$@"; rc=$?\nfor a in "$@"; do\n'
            f'  if [ "$a" = "{owner_file}" ] && [ ! -e "{tmp_path}/written" ]; then\n'
            f'    : > "{tmp_path}/written"; printf "42\\n{RUN}\\nme\\n1\\n" > "{owner_file}"\n'
            f"  fi\ndone\nexit $rc\n"
        )
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = round_command(owner_file, f"{lock}.wait.{RUN}", RUN)
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_look_that_says_held_has_removed_the_heartbeat_whenever_the_holder_writes(
    tmp_path: Path, lock: Path
) -> None:
    """The action is told "held" only by a look that removed the run's heartbeat: one told so
    while its heartbeat stayed had its holder let go 30 s later under a converging run (the
    owner file was read once to decide and again to print, and the holder wrote between)."""
    Path(f"{lock}.owner").write_text("7\nanother-run\nbatch.yml started by them\n1\n")
    heartbeat = Path(f"{lock}.wait.{RUN}")
    first = _round(tmp_path, lock)  # the holder writes the owner file during this look
    assert first[1:2] != [RUN] or not heartbeat.exists(), (first, heartbeat.exists())
    assert first[1] == "another-run" and heartbeat.exists()  # what it acted on: not yet held
    second = _round(tmp_path, lock)
    assert second[1] == RUN and not heartbeat.exists()  # the next look: held, heartbeat gone
