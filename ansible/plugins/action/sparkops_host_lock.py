"""Ansible action `sparkops_host_lock`: take the host's sparkops lock for this run, waiting
quietly while another run holds it (tasks/host_lock.yml).

    sparkops_host_lock:
      lock: /run/lock/sparkops-host.lock     # the flock; LOCK.owner names the run holding it
      id: "{{ _sparkops_lock_id }}"          # this run
      owner: "provision.yml started ..."     # what LOCK.owner says of this run
      wait: 1860                             # seconds to wait for another run to end
      grace: 1800                            # the lock outlives the run's last renewal this long
      heartbeat_grace: 30                    # ... and a waiting run's last heartbeat this long
      waiting_for: "{{ ... }}"               # the run the play already said it waits for

It starts the holder on the host (tasks/host_lock_holder.py, detached, the host's python3)
and waits here, on the controller: every 2 s one command on the host touches this run's
heartbeat file and reads LOCK.owner, until LOCK.owner names this run or `wait` seconds pass,
or ansible-playbook itself has gone (its workers run in sessions of their own, so a killed
run's worker would otherwise go on waiting, and beating, alone).
One task, one result: the `until` loop it replaces printed "FAILED - RETRYING" every 2 s
(about 130 lines for a four-minute wait) and never said who held the host (issue 43 item 4).
When another run than `waiting_for` takes the host while this one waits, one line says who
holds it now. The heartbeat comes from this controller's process, so a run killed while it
waits stops it, and its holder never takes the lock (the holder's docstring says how).

Returns `held` (bool), `owner` (LOCK.owner's lines when it last looked: pid, run id,
description, when that run took the lock) and `waited` (seconds). It never fails for a busy
host: the play's next task refuses with the fix.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()
HOLDER = "host_lock_holder.py"
POLL_S = 2.0
ARGS = ("lock", "id", "owner", "wait", "grace", "heartbeat_grace", "waiting_for")


def round_command(owner: str, heartbeat: str, run_id: str) -> str:
    """One look: the run's heartbeat touched (removed once the lock is its own: the holder then
    watches the owner file's renewals instead), then the owner file's lines.

    The owner file is read once, and what is printed is what was acted on. It was read twice
    (once to decide, once to print): a holder that wrote it between the two reads had the run
    told "held" while its heartbeat was touched, not removed, so the holder let go of the lock
    30 s later (heartbeat_grace) under a run still converging, and the next run took it."""
    q = shlex.quote
    lines_of_seen = "printf '%s\\n' \"$seen\""
    return (
        f"seen=$(cat {q(owner)} 2>/dev/null);"
        f' if [ "$({lines_of_seen} | sed -n 2p)" = {q(run_id)} ];'
        f" then rm -f {q(heartbeat)}; else touch {q(heartbeat)}; fi;"
        f' [ -z "$seen" ] || {lines_of_seen}; true'
    )


def start_command(python: str, source: str, args: list[str], lock: str, stale_s: int) -> str:
    """The holder started detached (its own session, no terminal, nothing to read or write),
    after the heartbeat it checks is made; heartbeats older than `stale_s` (of runs killed
    before their holder started, which nothing else removes) go first."""
    q = shlex.quote
    holder = " ".join(q(a) for a in [python, "-c", source, *args])
    folder, name = q(str(Path(lock).parent)), q(f"{Path(lock).name}.wait.*")
    return (
        f'find {folder} -maxdepth 1 -name {name} ! -newermt "@$(( $(date +%s) - {stale_s} ))"'
        f" -delete; touch {q(f'{lock}.wait.{args[1]}')}"
        f" && {{ setsid {holder} </dev/null >/dev/null 2>&1 & }}"
    )


def holder_line(host: str, lines: list[str]) -> str:
    """Who holds the host now, as the play's own waiting line says it."""
    since = ""
    if len(lines) > 3 and lines[3].isdigit():
        since = time.strftime(", holding it since %H:%M:%S UTC", time.gmtime(int(lines[3])))
    return (
        f"{host} is now held by another sparkops run: {lines[2]} (lock holder pid {lines[0]}"
        f"{since}). Still waiting for it to end."
    )


class ActionModule(ActionBase):
    """Start the host's lock holder for this run, then wait until it holds the lock."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = {k: self._task.args.get(k) for k in ARGS}
        missing = [k for k in ARGS[:-1] if args[k] in (None, "")]
        if missing:
            raise AnsibleActionFail(f"sparkops_host_lock needs {', '.join(missing)}")
        lock, run_id = str(args["lock"]), str(args["id"])
        owner, heartbeat = f"{lock}.owner", f"{lock}.wait.{run_id}"
        wait = float(args["wait"])
        source = Path(self._find_needle("files", HOLDER)).read_text(encoding="utf-8")
        holder_args = [lock, run_id, str(args["owner"]), str(args["wait"]), str(args["grace"])]
        holder_args.append(str(args["heartbeat_grace"]))
        python = self._python(task_vars)
        stale_s = 2 * int(float(args["heartbeat_grace"]))
        started = self._on_host(start_command(python, source, holder_args, lock, stale_s))
        if started["rc"] != 0:
            raise AnsibleActionFail(f"the lock holder did not start: {started['stderr'].strip()}")
        host = str(task_vars.get("inventory_hostname", "the host"))
        said = str(args["waiting_for"] or "")
        begun = time.monotonic()
        playbook = os.getppid()  # this worker's ansible-playbook
        while True:
            if os.getppid() != playbook:
                self._give_up(heartbeat)
                raise AnsibleActionFail("ansible-playbook ended while this run waited for the lock")
            lines = self._on_host(round_command(owner, heartbeat, run_id))["stdout"].splitlines()
            waited = round(time.monotonic() - begun, 1)
            if len(lines) > 1 and lines[1] == run_id:
                return {**result, "changed": False, "held": True, "owner": lines, "waited": waited}
            if len(lines) > 2 and lines[2] != said:
                said = lines[2]
                display.display(holder_line(host, lines))
            if waited >= wait:
                self._give_up(heartbeat)
                return {**result, "changed": False, "held": False, "owner": lines, "waited": waited}
            time.sleep(POLL_S)

    def _give_up(self, heartbeat: str) -> None:
        """This run stops waiting, and so does its holder: it sees the heartbeat gone."""
        # Where the host cannot be reached, the heartbeat goes stale instead.
        with contextlib.suppress(AnsibleError):
            self._on_host(f"rm -f {shlex.quote(heartbeat)}")

    def _on_host(self, command: str) -> dict[str, Any]:
        """Run one shell command on the host, as root where the play becomes root."""
        return self._low_level_execute_command(command, sudoable=True)

    def _python(self, task_vars: dict[str, Any]) -> str:
        """The host's python, as Ansible found it (else python3 on the PATH)."""
        facts = task_vars.get("ansible_facts") or {}
        given = str(self._templar.template(task_vars.get("ansible_python_interpreter") or ""))
        found = given if given and not given.startswith("auto") else ""
        return str(found or facts.get("discovered_interpreter_python") or "python3")
