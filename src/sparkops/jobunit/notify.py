"""`sparkops batch notify`: one JSON POST when a job unit finishes, stops, stalls or runs out
of restarts.

Called by the job's unit, never by the client (src/sparkops/batch is unchanged): its
ExecStopPost after every run (systemd hands it SERVICE_RESULT, EXIT_CODE and EXIT_STATUS), and
its OnFailure= unit once the unit gives up (`--on-failure`: the restart budget is spent). The
URL comes from the root-only env file batch.yml writes (SPARKOPS_NOTIFY_URL), so a webhook's
token is never on a command line or in the unit's properties, and it is never printed whole.

The body holds the job's name, the host, the event, the unit's state, the reason in the kit's
own words and the job's counts: never a record's text (a job's records are patient data), never
a key, never the client's free text.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkops.errors import UserError
from sparkops.jobdir.status import job_status
from sparkops.jobunit.state import (
    CLD_EXITED,
    RETRY_ERRORS,
    UnitState,
    last_stop_kind,
    show_unit,
    unit_state,
)
from sparkops.jobunit.unit import EXIT_CONFIG, EXIT_DONE, EXIT_RECORD_ERRORS, EXIT_SIGTERM
from sparkops.privacy import redact

URL_ENV = "SPARKOPS_NOTIFY_URL"
POST_TIMEOUT_S = 10.0
FINISHED = "finished"
FINISHED_WITH_ERRORS = "finished-with-errors"
STOPPED = "stopped"
STALLED = "stalled"
BUDGET_SPENT = "restart-budget-spent"


def stop_event(env: Mapping[str, str], stopped_kind: str | None) -> tuple[str, str, int | None]:
    """(event, reason, exit status) of one run's end, from ExecStopPost's environment."""
    code, status = env.get("EXIT_CODE", ""), env.get("EXIT_STATUS", "")
    if code == "exited" and status.isdigit():
        number = int(status)
        if number == EXIT_DONE:
            return FINISHED, "every record done", number
        if number == EXIT_RECORD_ERRORS:
            return (
                FINISHED_WITH_ERRORS,
                f"finished, some records are errors; {RETRY_ERRORS}",
                number,
            )
        if number == EXIT_CONFIG:
            return (
                STOPPED,
                "a usage or configuration error (journalctl -u the unit says which); not restarted",
                number,
            )
        if number == EXIT_SIGTERM:
            return STOPPED, "stopped by SIGTERM (systemctl stop, or the host shutting down)", number
        event = STALLED if stopped_kind == "stalled" else STOPPED
        why = f" ({stopped_kind})" if stopped_kind else ""
        return (
            event,
            f"stopped part-way{why}, exit {number}; the unit restarts it after its delay",
            number,
        )
    if code in ("killed", "dumped"):
        name = status if status.startswith("SIG") or not status else f"SIG{status}"
        return STOPPED, f"killed by {name}; the unit restarts it after its delay", None
    return (
        STOPPED,
        "the serving stack did not answer before the start's bound (the wait before the job); "
        "the unit tries again after its delay",
        None,
    )


def budget_event(
    env: Mapping[str, str], state: UnitState | None, stopped_kind: str | None
) -> tuple[str, str, int | None] | None:
    """The OnFailure unit's event: the restart budget is spent, unless the unit failed on an
    exit 2 (said already by the run's own ExecStopPost, and never restarted). systemd (251
    and later) hands the failed unit's last exit over as MONITOR_EXIT_CODE/STATUS; else the
    unit's properties say it (None: neither could be read)."""
    if "MONITOR_SERVICE_RESULT" in env:
        code, status = env.get("MONITOR_EXIT_CODE", ""), env.get("MONITOR_EXIT_STATUS", "")
        if code == "exited" and status == str(EXIT_CONFIG):
            return None
        number = int(status) if code == "exited" and status.isdigit() else None
        last = _last_exit(code, status, stopped_kind)
    elif state is not None:
        if state.exit_code == CLD_EXITED and state.exit_status == EXIT_CONFIG:
            return None
        number = state.exit_status if state.exit_code == CLD_EXITED else None
        last = state.last_exit
    else:
        return None
    reason = (
        f"the restart budget is spent after {last or 'the serving stack never answered'}; fix "
        "the cause, then run batch.yml again (it resumes)"
    )
    return BUDGET_SPENT, reason, number


def _last_exit(code: str, status: str, stopped_kind: str | None) -> str:
    """A run's end from systemd's EXIT_CODE/EXIT_STATUS words ("" when it never ran)."""
    if code == "exited":
        kind = f", {stopped_kind}" if stopped_kind and status == "1" else ""
        return f"exit {status}{kind}"
    if code in ("killed", "dumped"):
        return f"killed by SIG{status}" if status and not status.startswith("SIG") else status
    return ""


def counts(job_dir: Path) -> dict[str, Any] | None:
    """The job's counts (`batch status`), None when the folder holds no job yet."""
    try:
        st = job_status(job_dir)
    except (UserError, OSError):
        return None
    return {
        "total": st.total,
        "done": st.done,
        "errors": st.errors,
        "record_errors": st.record_errors,
        "remaining": st.remaining,
        "runs": st.runs,
        "complete": st.complete,
    }


def payload(
    job: str,
    event: str,
    reason: str,
    exit_status: int | None,
    state: UnitState | None,
    job_counts: dict[str, Any] | None,
    host: str,
    now: float,
) -> dict[str, Any]:
    """The JSON body: names, kinds and counts only."""
    return {
        "job": job,
        "host": host,
        "event": event,
        "reason": reason,
        "exit_status": exit_status,
        "state": state.state if state else None,
        "restarts": state.restarts if state else None,
        "counts": job_counts,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }


def post(url: str, body: dict[str, Any], timeout: float = POST_TIMEOUT_S) -> str | None:
    """POST `body` as JSON; None when the receiver took it (2xx), else why not (URL redacted)."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # http(s) only: check_url
            resp.read()
            return None
    except urllib.error.HTTPError as err:
        return f"{redact(url)} answered HTTP {err.code}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return f"{redact(url)} could not be reached ({type(reason).__name__})"


def check_url(url: str) -> None:
    """Only http(s): urllib would also open file: and ftp: URLs."""
    if not url.lower().startswith(("http://", "https://")):
        raise UserError(
            f"the notification URL {redact(url)!r} is not http:// or https://; fix "
            "sparkops_batch_notify_url (or --url)"
        )


def notify(
    job_dir: Path,
    unit: str,
    url: str,
    env: Mapping[str, str],
    on_failure: bool = False,
) -> tuple[dict[str, Any] | None, str | None]:
    """Build and send the notification for this moment: (the body or None when there is
    nothing to say, why it was not delivered or None)."""
    check_url(url)
    show = show_unit(unit)
    kind = last_stop_kind(job_dir)
    state = unit_state(unit, show, kind) if show is not None else None
    if on_failure:
        found = budget_event(env, state, kind)
        if found is None:
            return None, None
    else:
        found = stop_event(env, kind)
    event, reason, status = found
    name = unit.removeprefix("sparkops-batch-").removesuffix(".service")
    body = payload(
        name, event, reason, status, state, counts(job_dir), socket.gethostname(), time.time()
    )
    return body, post(url, body)
