"""What systemd says about a job's unit, in words: its state, its restarts, why it last stopped.

`systemctl show` is the source (read-only, allowed to every user): ActiveState and SubState
(running, waiting for serving, waiting to restart, failed), NRestarts (automatic restarts since
the unit was last started by hand or the host booted), and the main process's last exit
(ExecMainCode: 1 exited, 2 killed, 3 dumped; ExecMainStatus: its status or signal). The job
folder adds what systemd cannot know: why the client stopped (runs.jsonl's last `end` line,
e.g. "stalled"). `parse_show` and `UnitState.why` are pure; `read_unit_state` runs systemctl.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkops.errors import UserError
from sparkops.jobdir import lines
from sparkops.jobdir.folder import RUNS
from sparkops.jobdir.status import job_status
from sparkops.jobunit.unit import (
    EXIT_CONFIG,
    EXIT_DONE,
    EXIT_RECORD_ERRORS,
    EXIT_SIGTERM,
    EXIT_STOPPED,
    UNIT_DIR,
    UNIT_PREFIX,
    job_of_unit_file,
)

PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "ExecMainCode",
    "ExecMainStatus",
    "UnitFileState",
)
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3
RETRY_ERRORS = (
    'run batch.yml again with -e \'{"sparkops_batch_extra_args": ["--retry-errors"]}\' '
    "(or `sparkops batch run ... --retry-errors` on the host) to send them again"
)
SHOW_TIMEOUT_S = 10


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show -p A,B` output (KEY=value lines) as a mapping."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True, slots=True)
class UnitState:
    """One job unit as systemd sees it now, and the job folder's last stop reason."""

    unit: str
    active: str  # ActiveState
    sub: str  # SubState
    result: str
    restarts: int
    exit_code: int  # ExecMainCode (0: the main process has not run since the unit started)
    exit_status: int
    enabled: str  # UnitFileState
    stopped_kind: str | None = None  # runs.jsonl's last end line: "stalled", "no-answer", ...
    # the job folder's verdict where systemd no longer knows the last exit (after a boot):
    # "done", "errors" (finished with record errors) or None (unfinished, or unread)
    folder: str | None = None

    @property
    def state(self) -> str:
        return f"{self.active} ({self.sub})"

    @property
    def last_exit(self) -> str:
        """The main process's last end, in words ("" when it has not ended since it started)."""
        if self.exit_code == CLD_EXITED:
            meaning = {
                EXIT_DONE: "every record done",
                EXIT_STOPPED: "stopped part-way, resumable",
                EXIT_CONFIG: "a usage or configuration error",
                EXIT_RECORD_ERRORS: "finished, some records are errors",
                EXIT_SIGTERM: "stopped by SIGTERM: systemctl stop or a shutdown",
            }.get(self.exit_status, "an unexpected status")
            kind = f", {self.stopped_kind}" if self.stopped_kind and self.exit_status == 1 else ""
            return f"exit {self.exit_status} ({meaning}{kind})"
        if self.exit_code in (CLD_KILLED, CLD_DUMPED):
            return f"killed by {signal_name(self.exit_status)}"
        return ""

    def why(self) -> str:
        """One sentence: what the unit does now and why it last stopped, with the next step."""
        last = self.last_exit
        if self.active == "active":
            said = "running"
        elif self.active == "activating" and self.sub == "start-pre":
            said = "waiting for the serving stack to answer a chat completion before it starts"
        elif self.active == "activating" and self.sub == "auto-restart":
            said = f"waiting to restart after {last or 'a failed start'}"
        elif self.active == "failed" and self.exit_code == CLD_EXITED and self.exit_status == 2:
            said = (
                f"failed: {last}; `journalctl -u {self.unit}` says what to fix, then run "
                "batch.yml again (it resumes)"
            )
        elif self.active == "failed":
            after = last or "the serving stack never answered"
            said = (
                f"failed: the restart budget is spent after {after}; fix the cause "
                f"(`journalctl -u {self.unit}`), then run batch.yml again (it resumes)"
            )
        elif self.exit_code == CLD_EXITED and self.exit_status == EXIT_RECORD_ERRORS:
            said = f"finished with record errors; {RETRY_ERRORS}"
        elif self.exit_code == CLD_EXITED and self.exit_status == EXIT_DONE:
            said = "finished"
        elif self.exit_code == 0 and self.folder == "done":
            said = "finished (the job folder says so; systemd forgot the exit at the boot)"
        elif self.exit_code == 0 and self.folder == "errors":
            said = f"finished with record errors (the job folder says so); {RETRY_ERRORS}"
        elif last:
            said = f"stopped: {last}"
        else:
            said = self.state
        if self.restarts:
            said += f"; restarted {self.restarts} time(s) since it was started or the host booted"
        return f"unit {self.unit}: {said}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state, "last_exit": self.last_exit, "why": self.why()}


def unit_state(
    unit: str, show: dict[str, str], stopped_kind: str | None = None, folder: str | None = None
) -> UnitState:
    """A UnitState from `systemctl show`'s properties (parse_show)."""
    return UnitState(
        unit=unit,
        active=show.get("ActiveState", "unknown"),
        sub=show.get("SubState", "unknown"),
        result=show.get("Result", ""),
        restarts=_int(show.get("NRestarts")),
        exit_code=_int(show.get("ExecMainCode")),
        exit_status=_int(show.get("ExecMainStatus")),
        enabled=show.get("UnitFileState", ""),
        stopped_kind=stopped_kind,
        folder=folder,
    )


def folder_verdict(job_dir: Path) -> str | None:
    """ "done", "errors" (finished with record errors) or None, from the job folder alone."""
    try:
        st = job_status(job_dir)
    except (UserError, OSError):
        return None
    if not st.complete or st.empty_input:
        return None
    return "errors" if st.errors else "done"


def last_stop_kind(job_dir: Path) -> str | None:
    """Why the client's last run stopped early, from runs.jsonl ("stalled", "no-answer", ...;
    None when it did not stop early, or never ended)."""
    kind = None
    try:
        for event in lines.run_events(job_dir / RUNS):
            if event.event == "end":
                value = event.extra.get("stopped")
                kind = str(value) if value is not None else None
    except OSError:  # a folder this user cannot read
        return None
    return kind


@dataclass(frozen=True, slots=True)
class JobUnitFile:
    """A unit file batch.yml installed: the job's name, its folder and the unit's name."""

    name: str
    out: Path
    unit: str


def job_units(unit_dir: Path = Path(UNIT_DIR)) -> list[JobUnitFile]:
    """Every job unit batch.yml installed on this host, by name."""
    found = []
    for path in sorted(unit_dir.glob(f"{UNIT_PREFIX}*.service")):
        try:
            job = job_of_unit_file(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if job is not None:
            found.append(JobUnitFile(job[0], Path(job[1]), path.name))
    return found


def unit_for_dir(job_dir: Path, unit_dir: Path = Path(UNIT_DIR)) -> JobUnitFile | None:
    """The unit that runs the job in `job_dir`, if batch.yml installed one."""
    want = job_dir.resolve()
    for job in job_units(unit_dir):
        if job.out.resolve() == want:
            return job
    return None


def show_unit(unit: str) -> dict[str, str] | None:
    """`systemctl show UNIT`'s properties; None where systemctl cannot answer (no systemd)."""
    try:
        done = subprocess.run(
            ["systemctl", "show", "--property=" + ",".join(PROPERTIES), unit],
            capture_output=True,
            text=True,
            timeout=SHOW_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_show(done.stdout) if done.returncode == 0 else None


def read_unit_state(job_dir: Path, unit_dir: Path = Path(UNIT_DIR)) -> UnitState | None:
    """The state of the unit that runs `job_dir` (None: no unit, or no systemd to ask)."""
    job = unit_for_dir(job_dir, unit_dir)
    if job is None:
        return None
    show = show_unit(job.unit)
    if show is None:
        return None
    return unit_state(job.unit, show, last_stop_kind(job_dir), folder_verdict(job_dir))
