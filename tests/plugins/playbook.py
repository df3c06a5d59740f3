"""The one way tests run ``ansible-playbook``: the kit's ansible.cfg, no colour, a parsed recap.

Unit, integration and infra tests all run real playbooks (the inventory check on the
controller, the filter seam, roles against systemd test hosts). They used to build the command,
the environment and the PLAY RECAP regex each in their own way; here it is done once, the way
the README tells a user to run them (``ANSIBLE_CONFIG=ansible/ansible.cfg``, the venv's
``ansible-playbook``), so a test differs from another only in what it asks of the playbook.

- `run_playbook(playbook, inventory, *args, check=, diff=, extra_vars=, env=, inherit_env=,
  cwd=, timeout=)` runs one to the end and returns a `PlaybookRun` (exit status, stdout,
  stderr, seconds, recap per host).
- `start_playbook(...)` starts one (stdout and stderr merged) for tests that run several at
  once or watch the output as it comes; `finish(process)` turns it into a `PlaybookRun`.
- `parse_recap(text)` reads the PLAY RECAP lines: host -> `Recap(ok, changed, unreachable,
  failed, ...)`.

A bare playbook name ("provision.yml") means ansible/playbooks/<name>.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "ansible" / "playbooks"
ANSIBLE_CFG = REPO / "ansible" / "ansible.cfg"
# A test-only callback that imports the plugins every task needs before ansible-playbook forks
# its workers (ansible_callbacks/sparkops_preload.py: about half of each run's time otherwise).
CALLBACKS = Path(__file__).resolve().parent / "ansible_callbacks"
# The test hosts' connection (ansible_connections/sparkops_testhost.py).
CONNECTIONS = Path(__file__).resolve().parent / "ansible_connections"
# ok, changed, unreachable and failed are always printed; the later counters since ansible 2.8.
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)"
    r"\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)"
    r"(?:\s+skipped=(?P<skipped>\d+))?(?:\s+rescued=(?P<rescued>\d+))?"
    r"(?:\s+ignored=(?P<ignored>\d+))?",
    re.M,
)


@dataclass(frozen=True)
class Recap:
    """One host's line of the PLAY RECAP."""

    ok: int
    changed: int
    unreachable: int
    failed: int
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


def parse_recap(text: str) -> dict[str, Recap]:
    """Host -> its PLAY RECAP counts (the last recap wins when a run printed several)."""
    recaps = {}
    for match in RECAP.finditer(text):
        counts = {k: int(v) for k, v in match.groupdict().items() if k != "host" and v is not None}
        recaps[match.group("host")] = Recap(**counts)
    return recaps


@dataclass
class PlaybookRun:
    """One finished ansible-playbook run."""

    rc: int
    stdout: str
    stderr: str = ""
    seconds: float = 0.0
    recap: dict[str, Recap] = field(default_factory=dict)

    @property
    def output(self) -> str:
        """Everything the run printed, stdout then stderr."""
        return self.stdout + self.stderr

    @property
    def text(self) -> str:
        """The output with line breaks folded: ansible-core 2.19 wraps long error messages."""
        return " ".join(self.output.split())

    @property
    def changed(self) -> int:
        """Tasks changed on every host together; -1 when no PLAY RECAP was printed."""
        return sum(r.changed for r in self.recap.values()) if self.recap else -1

    @property
    def failed(self) -> int:
        """Tasks failed on every host together; -1 when no PLAY RECAP was printed."""
        return sum(r.failed for r in self.recap.values()) if self.recap else -1

    def changed_on(self, host: str) -> int:
        """Tasks changed on ``host``; -1 when the recap has no line for it."""
        return self.recap[host].changed if host in self.recap else -1


def playbook_path(playbook: str | Path) -> Path:
    """A bare name means the kit's ansible/playbooks/<name>; anything else is used as given."""
    path = Path(playbook)
    return PLAYBOOKS / path if path.parent == Path(".") else path


def playbook_env(env: Mapping[str, str] | None = None, *, inherit: bool = True) -> dict[str, str]:
    """The environment a user has after following the README, plus ``env`` (and the tests'
    preload callback, which changes no behaviour, only how often workers import plugins).

    ``inherit=False`` starts from nothing but PATH (the venv's bin first) and HOME, for a test
    that must show a playbook needs nothing else from the caller's environment.
    """
    if inherit:
        base = dict(os.environ)
    else:
        base = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(Path.home()),
        }
    return {
        **base,
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
        "ANSIBLE_CONNECTION_PLUGINS": str(CONNECTIONS),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        **(env or {}),
    }


def playbook_command(
    playbook: str | Path,
    inventory: str | Path,
    *args: str,
    check: bool = False,
    diff: bool = False,
    extra_vars: Mapping[str, Any] | None = None,
) -> list[str]:
    """The argv: the venv's ansible-playbook, ``-i inventory``, the playbook, then options."""
    command = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(inventory),
        str(playbook_path(playbook)),
    ]
    if extra_vars is not None:
        command += ["-e", json.dumps(dict(extra_vars))]
    command += ["--check"] if check else []
    command += ["--diff"] if diff else []
    return [*command, *args]


def start_playbook(
    playbook: str | Path,
    inventory: str | Path,
    *args: str,
    check: bool = False,
    diff: bool = False,
    extra_vars: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = True,
    cwd: str | Path | None = None,
    new_session: bool = False,
    merge_stderr: bool = True,
) -> subprocess.Popen[str]:
    """Start one playbook: its output in ``process.stdout`` as it comes (stderr merged unless
    ``merge_stderr=False``). ``new_session`` puts it in its own process group, so a test can
    kill ansible and its workers together."""
    command = playbook_command(
        playbook, inventory, *args, check=check, diff=diff, extra_vars=extra_vars
    )
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        env=playbook_env({"PYTHONUNBUFFERED": "1", **(env or {})}, inherit=inherit_env),
        cwd=cwd,
        start_new_session=new_session,
    )


def finish(
    process: subprocess.Popen[str], timeout: float = 900, since: float | None = None
) -> PlaybookRun:
    """Wait for a started playbook (killed, then subprocess.TimeoutExpired, past ``timeout``);
    ``seconds`` counts from ``since`` (a time.monotonic() reading) when given, else it is 0."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return PlaybookRun(
        rc=process.returncode,
        stdout=stdout,
        stderr=stderr or "",
        seconds=time.monotonic() - since if since is not None else 0.0,
        recap=parse_recap(stdout),
    )


def run_playbook(
    playbook: str | Path, inventory: str | Path, *args: str, timeout: float = 900, **options: Any
) -> PlaybookRun:
    """Run one playbook to the end, stdout and stderr apart; ``options`` as `start_playbook`."""
    since = time.monotonic()
    process = start_playbook(playbook, inventory, *args, merge_stderr=False, **options)
    return finish(process, timeout=timeout, since=since)
