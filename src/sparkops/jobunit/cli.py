"""`sparkops batch wait-ready|notify|units`: the job unit's own commands (jobunit/).

Registered under `sparkops batch` by one call in batch/cli.py; nothing here imports the
client. `unit_sentence` and `unit_json` are what `batch status DIR` adds about the job's unit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from sparkops.errors import UserError
from sparkops.jobdir.status import job_status
from sparkops.jobunit import notify as notify_mod
from sparkops.jobunit.progress import read_progress
from sparkops.jobunit.state import (
    folder_verdict,
    job_units,
    last_stop_kind,
    read_unit_state,
    show_unit,
    unit_state,
)
from sparkops.jobunit.wait import wait_ready
from sparkops.privacy import redact

WAIT_WITHIN_S = 3600.0


def register(sub: argparse._SubParsersAction) -> None:
    """The three sub-commands, under `sparkops batch`."""
    wait = sub.add_parser(
        "wait-ready",
        help="wait until every endpoint answers a chat completion (a job unit's start)",
        description="Wait until every endpoint lists a model on /v1/models and answers one "
        "chat completion of one token; exit 0 then, 1 when --within seconds passed first. "
        "The job unit batch.yml installs runs it before `batch run` after every boot.",
    )
    wait.add_argument(
        "--endpoint", dest="endpoints", action="append", required=True, metavar="URL",
        help="a server's base URL (repeat for several)",
    )  # fmt: skip
    wait.add_argument(
        "--api-key-env", default=None, metavar="NAME",
        help="the environment variable holding the servers' API key (its name, not the key)",
    )  # fmt: skip
    wait.add_argument(
        "--within", type=float, default=WAIT_WITHIN_S, metavar="SECONDS",
        help="give up after this long (0: wait as long as it takes)",
    )  # fmt: skip
    wait.add_argument("--interval", type=float, default=5.0, metavar="SECONDS",
                      help="seconds between two tries")  # fmt: skip
    wait.set_defaults(func=_wait)

    note = sub.add_parser(
        "notify",
        help="POST a job's state as JSON (a job unit's ExecStopPost and OnFailure)",
        description="One JSON POST with the job's name, counts, state and the reason it "
        "stopped: never record text, never a key. Reads systemd's EXIT_CODE/EXIT_STATUS "
        f"(ExecStopPost). The URL is --url or ${notify_mod.URL_ENV}; without either, nothing "
        "is sent.",
    )
    note.add_argument("dir", type=Path, help="the job folder (batch run's --out)")
    note.add_argument("--unit", required=True, help="the job's unit (sparkops-batch-NAME.service)")
    note.add_argument("--url", default=None, help=f"where to POST (default: ${notify_mod.URL_ENV})")
    note.add_argument(
        "--on-failure", action="store_true",
        help="called by the unit's OnFailure=: say only that the restart budget is spent",
    )  # fmt: skip
    note.set_defaults(func=_notify)

    units = sub.add_parser(
        "units",
        help="every batch job unit on this host: state, restarts, last stop, progress (the "
        "newest status line in its journal: run as root or a member of systemd-journal)",
    )
    units.add_argument("--json", action="store_true", help="print one JSON list")
    units.set_defaults(func=_units)


def _headers(api_key_env: str | None) -> dict[str, str]:
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env, "")
    if not key:
        raise UserError(f"--api-key-env {api_key_env}: that variable is not set or empty; set it")
    return {"Authorization": f"Bearer {key}"}


def _wait(args: argparse.Namespace) -> int:
    if args.within < 0 or args.interval <= 0:
        raise UserError("--within must be 0 or more and --interval more than 0")
    ready = asyncio.run(wait_ready(args.endpoints, _headers(args.api_key_env), args.within,
                                   args.interval))  # fmt: skip
    return 0 if ready else 1


def _notify(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get(notify_mod.URL_ENV, "")
    if not url:
        return 0  # no notification asked for
    body, failed = notify_mod.notify(args.dir, args.unit, url, os.environ, args.on_failure)
    if body is None:
        return 0
    if failed:
        print(f"sparkops: warning: the {body['event']} notification was not delivered: {failed}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"sparkops: {body['event']} notification sent to {redact(url)}")
    return 0


def job_unit_rows() -> list[dict[str, Any]]:
    """One row per job unit on this host: its unit state, its job's counts, and the newest
    status line in its journal (jobunit/progress.py; null where there is none)."""
    rows = []
    for job in job_units():
        show = show_unit(job.unit)
        kind, folder = last_stop_kind(job.out), folder_verdict(job.out)
        state = unit_state(job.unit, show, kind, folder) if show is not None else None
        try:
            counts: dict[str, Any] | None = job_status(job.out).as_dict()
        except (UserError, OSError) as err:
            counts = {"unreadable": str(err)}
        progress = read_progress(job.unit)
        rows.append({
            "name": job.name, "out": str(job.out), "unit": job.unit,
            "state": state.as_dict() if state else None, "job": counts,
            "progress": progress.as_dict() if progress else None,
        })  # fmt: skip
    return rows


def _units(args: argparse.Namespace) -> int:
    rows = job_unit_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no batch job units on this host (batch.yml installs one per job)")
    for row in rows:
        why = row["state"]["why"] if row["state"] else f"unit {row['unit']}: systemd did not answer"
        job = row["job"] or {}
        progress = (
            f"{job['done']} done, {job['errors']} errors, {job['remaining']} remaining of "
            f"{job['total']}"
            if "total" in job
            else job.get("unreadable", "no job yet")
        )
        print(f"{row['name']} ({row['out']}): {why}; {progress}")
        if row["progress"]:
            line = row["progress"]
            print(f"  last progress line ({line['at'] or 'time unknown'}): {line['line']}")
    return 0


def unit_json(job_dir: Path) -> dict[str, Any] | None:
    """`batch status --json`'s "unit": the job unit's state, None when it has none."""
    state = read_unit_state(job_dir)
    return state.as_dict() if state else None


def unit_sentence(job_dir: Path) -> str:
    """What `batch status` adds to its line about the job's unit ("" when it has none)."""
    state = read_unit_state(job_dir)
    return f"; {state.why()}" if state else ""
