"""Waiting for the host's sparkops lock (issue 43 item 4), on a systemd test host.

1. A run killed while it waited left its lock holder behind: an `flock --wait` that took the
   lock whenever it came free, after the run was gone, and held it for the whole grace (30
   minutes): the next run was refused as busy with a run that had ended. The holder now needs
   the heartbeat of a waiting run (ansible/playbooks/tasks/host_lock_holder.py): the killed
   run's holder exits without ever taking the lock, and the next run goes on.
2. A run waiting for the lock printed "FAILED - RETRYING" every 2 s (about 130 lines for a
   four-minute wait). It now says once who holds the host, since when, and waits in one task
   (the sparkops_host_lock action).

The runs are a playbook of the kit's own lock tasks (provision.yml's first and last plays hold
them: tasks/host_lock.yml, then some work, then tasks/host_unlock.yml). The killed waiter
comes from "another controller" (a `hostname` on its PATH that says so), as a second machine
would be: a run from this controller would take over its lock as a run that has ended.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins.hosts import Host, inventory
from tests.plugins.playbook import PlaybookRun, run_playbook, start_playbook

pytestmark = [pytest.mark.infra, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "ansible" / "playbooks"
# The playbook here is not beside ansible/playbooks/action_plugins (a link to these).
ACTIONS = {"ANSIBLE_ACTION_PLUGINS": str(REPO / "ansible" / "plugins" / "action")}
LOCK = "/run/lock/sparkops-host.lock"
OWNER = f"{LOCK}.owner"
WAITING = "is busy with another sparkops run"
RUN_ID = re.compile(r"\b\d+-\d{8}T\d{6}\b")  # tasks/host_lock.yml's _sparkops_lock_id
HEARTBEAT_GRACE_S = 30  # ansible/playbooks/vars/host_lock.yml: _sparkops_lock_heartbeat_s


def lock_play() -> list[dict[str, Any]]:
    vars_files = [str(PLAYBOOKS / "vars" / "host_lock.yml")]
    return [
        {
            "name": "Take the host's lock, as provision.yml's first play does",
            "hosts": "testbed",
            "gather_subset": ["min"],
            "vars_files": vars_files,
            "pre_tasks": [
                {
                    "name": "Take the host's sparkops lock for this run",
                    "ansible.builtin.import_tasks": str(PLAYBOOKS / "tasks" / "host_lock.yml"),
                }
            ],
            "tasks": [
                {
                    "name": "Work while holding the lock",
                    "ansible.builtin.command": "sleep {{ work_s | default(0) }}",
                    "changed_when": False,
                }
            ],
        },
        {
            "name": "Release the host's lock, as provision.yml's last play does",
            "hosts": "testbed",
            "gather_facts": False,
            "vars_files": vars_files,
            "tasks": [
                {
                    "name": "Release the host's sparkops lock",
                    "ansible.builtin.import_tasks": str(PLAYBOOKS / "tasks" / "host_unlock.yml"),
                }
            ],
        },
    ]


@dataclass
class Started:
    """A lock playbook running in its own process group, its output read as it comes."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None
    orphans: list[int] = field(default_factory=list)

    def saw(self, text: str, timeout: float = 300) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            if self.process.poll() is not None and self.reader and not self.reader.is_alive():
                return False
            time.sleep(0.5)
        return False

    def workers(self) -> list[int]:
        """ansible-playbook's workers (each in a session of its own, so a signal to the run's
        process group does not reach them)."""
        found = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True
        )
        return [int(pid) for pid in found.stdout.split()]

    def kill(self, workers_too: bool = True) -> list[int]:
        """SIGKILL ansible-playbook (as a lost session or `kill -9` would), and its workers
        unless asked not to; the workers' pids."""
        workers = self.workers()
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        for pid in workers if workers_too else []:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.orphans += [] if workers_too else workers
        return workers


def alive(pid: int) -> bool:
    """Whether a process (not a zombie) of this pid runs here."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@dataclass
class Bed:
    host: Host
    root: Path

    @contextmanager
    def started(self, *args: str, env: dict[str, str] | None = None) -> Iterator[Started]:
        process = start_playbook(
            self.root / "lock.yml", self.root / "hosts.yml", *args,
            env={**ACTIONS, **(env or {})}, new_session=True,
        )  # fmt: skip
        run = Started(process)
        assert process.stdout is not None
        stdout = process.stdout
        run.reader = threading.Thread(target=lambda: run.lines.extend(stdout), daemon=True)
        run.reader.start()
        try:
            yield run
        finally:
            if process.poll() is None:
                run.kill()
            for pid in run.orphans:  # a worker of this run left running by a failed test
                with contextlib.suppress(OSError):
                    if str(self.root / "lock.yml") in Path(f"/proc/{pid}/cmdline").read_text():
                        os.killpg(pid, signal.SIGKILL)

    def run(self, *args: str) -> PlaybookRun:
        run = run_playbook(
            self.root / "lock.yml", self.root / "hosts.yml", *args, env=ACTIONS, timeout=600
        )
        assert "Traceback" not in run.output
        return run

    def waiting(self) -> list[str]:
        """The heartbeat files of the runs waiting for the lock."""
        return self.host.exec(f"ls {LOCK}.wait.* 2>/dev/null").stdout.split()

    def owner(self) -> list[str]:
        return self.host.exec(["cat", OWNER]).stdout.splitlines()

    def run_ids(self) -> set[str]:
        """The runs whose lock holder runs on the host (each names its run's id)."""
        return set(RUN_ID.findall(self.host.exec(["ps", "-ww", "-eo", "args"]).stdout))

    def holders(self, run_id: str) -> list[str]:
        """The lock holder of the run (a process whose command line names the run id and the
        lock, and lives beyond one step: python3 since the fix, flock before it)."""
        pattern = f"^(/usr/bin/python3|flock) .*{run_id}"
        return self.host.exec(["pgrep", "-f", "--", pattern]).stdout.split()

    def wait_for(self, check, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(1)
        pytest.fail(f"{what} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def bed(systemd_host, tmp_path_factory) -> Bed:
    host: Host = systemd_host("amd64")
    root = tmp_path_factory.mktemp("host-lock")
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory([host])))
    (root / "lock.yml").write_text(yaml.safe_dump(lock_play(), sort_keys=False))
    # `hostname` on another controller's PATH: the kit names the controller with it.
    other = root / "other-controller"
    other.mkdir()
    (other / "hostname").write_text("#!/bin/sh\necho other-controller\n")
    (other / "hostname").chmod(0o755)
    return Bed(host, root)


def test_a_run_killed_while_it_waits_leaves_nothing_that_takes_the_lock(bed: Bed) -> None:
    host = bed.host
    with bed.started("-e", "work_s=900") as first:
        bed.wait_for(lambda: len(bed.owner()) >= 3, "the first run never held the lock")
        first_id = bed.owner()[1]
        # A run from another controller waits for it, and is killed while it waits.
        path = f"{bed.root / 'other-controller'}:{os.environ['PATH']}"
        with bed.started(env={"PATH": path}) as killed:
            assert killed.saw(WAITING), "".join(killed.lines)[-4000:]
            bed.wait_for(
                lambda: bed.run_ids() - {first_id}, "the waiting run's holder never started"
            )
            (killed_id,) = bed.run_ids() - {first_id}
            # Killed once it waits: its holder runs (and, since the fix, its heartbeat beats).
            bed.wait_for(lambda: len(bed.holders(killed_id)) > 0, "no holder for the waiting run")
            time.sleep(5)
            # ansible-playbook dies; the worker running the wait notices and stops beating.
            workers = killed.kill(workers_too=False)
            bed.wait_for(
                lambda: not any(alive(pid) for pid in workers), "the killed run's worker waits on"
            )
        # Its holder needs the run's heartbeat: it goes, and never took the lock.
        bed.wait_for(
            lambda: not bed.holders(killed_id),
            "the killed run's lock holder is still there",
            timeout=HEARTBEAT_GRACE_S + 60,
        )
        assert bed.owner()[1] == first_id
        assert bed.waiting() == []
        first.kill()  # the first run ends without releasing: its holder still holds the lock
    assert bed.owner()[1] == first_id and bed.holders(first_id)

    # The next run from this controller takes over the ended run's lock at once and goes on.
    after = bed.run("-e", "sparkops_host_lock_wait=60")
    assert after.rc == 0, after.output[-4000:]
    assert "End the lock holder of a run from this controller that has ended" in after.output
    assert "still busy with another sparkops run" not in after.output
    assert "FAILED - RETRYING" not in after.output
    # Released at the end: no owner file, no holder, no heartbeat left.
    bed.wait_for(lambda: not bed.holders(first_id), "the ended run's holder is still there", 30)
    assert host.exec(["test", "-e", OWNER]).returncode != 0
    assert bed.waiting() == []


def test_a_waiting_run_says_once_who_holds_the_host_and_since_when(bed: Bed) -> None:
    with bed.started("-e", "work_s=25") as first:
        bed.wait_for(lambda: len(bed.owner()) >= 3, "the first run never held the lock")
        owner = bed.owner()
        second = bed.run()
        assert first.process.wait(timeout=300) == 0, "".join(first.lines)[-4000:]
    assert second.rc == 0, second.output[-4000:]
    taken = time.strftime("%H:%M:%S", time.gmtime(int(owner[3])))
    said = [line for line in second.output.splitlines() if WAITING in line]
    assert len(said) == 1, second.output[-4000:]
    assert (
        f"{bed.host.name} is busy with another sparkops run: {owner[2]} (lock holder pid"
        f" {owner[0]}). Waiting up to 1860 s for it to end (sparkops_host_lock_wait); it has held"
        f" this host since {taken} UTC."
    ) in second.text, second.output[-4000:]
    assert "FAILED - RETRYING" not in second.output
    assert "TASK [Take this host's lock for the whole run, waiting while another run holds it]" in (
        second.output
    )
