"""`sparkops batch run|status`."""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

from sparkops.batch.job import JobConfig, run_job
from sparkops.batch.policy import DEFAULT_POLICY, POLICIES
from sparkops.batch.status import job_status
from sparkops.errors import JobStopped, UserError
from sparkops.files import open_private

CRASH_LOG = "crash.log"
EXIT_STATUSES = """\
exit status:
  0    every record done
  3    finished, some records are errors (the summary names the commonest cause)
  1    stopped part-way (fail-fast, no endpoint answered for --retry-for, every
       endpoint stalled, --strict-serving saw the server change, disk full): fix the
       cause, run the same command to resume
  2    usage or configuration error, before any request
  130  interrupted (SIGINT), 143 (SIGTERM): in-flight calls cancelled, finished
       records kept; run the same command to resume"""


def register(subparsers: argparse._SubParsersAction) -> None:
    batch = subparsers.add_parser("batch", help="run a batch job through a pipeline (resumable)")
    sub = batch.add_subparsers(dest="batch_command", required=True)

    run = sub.add_parser(
        "run",
        help="run or resume a job; re-run the same command to resume",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--pipeline", type=Path, help="pipeline YAML (not needed for OpenAI batch files)"
    )
    run.add_argument(
        "--input", type=Path, required=True, help="JSONL / CSV records, or an OpenAI batch file"
    )
    run.add_argument(
        "--out", type=Path, required=True, help="job directory (results.jsonl, timeline, report)"
    )
    run.add_argument(
        "--endpoint", action="append", required=True, help="vLLM or LiteLLM base URL (repeatable)"
    )
    run.add_argument(
        "--concurrency", type=int, default=1000, help="requests in flight (default 1000)"
    )
    run.add_argument(
        "--schedule",
        choices=sorted(POLICIES),
        default=DEFAULT_POLICY,
        help="which ready call goes next: fifo (arrival order) or step-aware (favour the step "
        f"whose prefix is hottest in the cache, bounded wait) (default {DEFAULT_POLICY})",
    )
    run.add_argument(
        "--schedule-max-wait",
        type=int,
        help="step-aware: a ready call goes next once this many newer calls became ready "
        "(default: the concurrency, at least 64)",
    )
    run.add_argument("--api-key-env", help="environment variable holding the API key")
    run.add_argument("--id-field", default="id", help="record id field (default id)")
    run.add_argument(
        "--restart", action="store_true", help="start over; old files kept in DIR/previous-*/"
    )
    run.add_argument(
        "--request-timeout", type=float, default=600.0, help="seconds per request (default 600)"
    )
    run.add_argument(
        "--retry-for",
        type=_positive_float,
        default=1800.0,
        help="stop the job (resumable, exit 1) when calls fail and no endpoint has answered for "
        "this many seconds; a call retried this long while others succeed becomes a record "
        "error (default 1800)",
    )
    run.add_argument(
        "--fail-fast",
        type=_non_negative_int,
        default=20,
        metavar="N",
        help="stop (resumable, exit 1) when the first N records all fail with one cause (a "
        "wrong API key, a field the records lack), without recording them as finished; 0 turns "
        "this off (default 20)",
    )
    run.add_argument(
        "--sample-interval", type=float, default=5.0, help="seconds between /metrics samples"
    )
    run.add_argument(
        "--stall-after",
        type=float,
        metavar="S",
        help="an endpoint with calls in flight and no progress (no answer, its /metrics token "
        "counters still) for S seconds is stalled: no new calls, its in-flight calls go to the "
        "other endpoints, it is probed again later; with every endpoint stalled the job stops "
        "(resumable, exit 1). Default: the longest of 120 s, 4 sample intervals and 3 times "
        "the slowest answer so far; 0 turns this off",
    )
    run.add_argument(
        "--strict-serving",
        action="store_true",
        help="stop (resumable, exit 1) when an endpoint's vLLM version, model, max length or "
        "cache configuration changes during the job (without it the change is recorded in "
        "DIR/serving.jsonl, shown and reported, and the job goes on)",
    )
    run.add_argument(
        "--stack-record",
        type=Path,
        metavar="FILE",
        help="the deploy's stack-record.json (next to compose.yml) to keep in the job's "
        "serving record: profile, image, rendered command and environment (no secrets)",
    )
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.set_defaults(func=_run)

    status = sub.add_parser("status", help="how far a job got")
    status.add_argument("dir", type=Path)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)


def _run(args: argparse.Namespace) -> int:
    try:
        return _run_job(args)
    except (UserError, JobStopped):
        raise
    except Exception as err:  # a bug: one line here, the traceback in the job directory
        raise JobStopped(_crash_line(args.out, err)) from None


def _crash_line(out: Path, err: Exception) -> str:
    """Keep a crash's traceback in DIR/crash.log (0600: it may quote record text) and say
    where; what was journalled stays, so the same command resumes once the bug is fixed."""
    where = "the job directory could not hold crash.log"
    try:
        fd = open_private(out / CRASH_LOG, os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
            fh.write("".join(traceback.format_exception(err)))
        where = f"traceback in {out / CRASH_LOG}"
    except OSError:
        pass
    return (
        f"internal error ({type(err).__name__}); finished records are kept and the same "
        f"command resumes; please report it ({where})"
    )


def _run_job(args: argparse.Namespace) -> int:
    summary = run_job(
        JobConfig(
            input=args.input,
            out=args.out,
            endpoints=args.endpoint,
            pipeline=args.pipeline,
            concurrency=args.concurrency,
            id_field=args.id_field,
            api_key_env=args.api_key_env,
            restart=args.restart,
            request_timeout=args.request_timeout,
            retry_for=args.retry_for,
            sample_interval=args.sample_interval,
            progress=not args.no_progress,
            policy=args.schedule,
            max_wait=args.schedule_max_wait,
            fail_fast=args.fail_fast,
            stall_after=args.stall_after,
            strict_serving=args.strict_serving,
            stack_record=args.stack_record,
        )
    )
    rpm = f"{summary.records_per_min:,.0f}" if summary.records_per_min else "-"
    hit = f"{summary.hit_rate:.1%}" if summary.hit_rate is not None else "-"
    print(
        f"{summary.out}: {summary.done} done, {summary.errors} errors, {summary.skipped} already "
        f"finished, {summary.calls} calls, {rpm} records/min, prefix cache hit {hit}"
    )
    if summary.job_errors:
        cause, count = summary.causes[0] if summary.causes else ("unknown", summary.job_errors)
        print(
            f"{summary.out}: finished with {summary.job_errors} record error(s) of "
            f"{summary.job_done + summary.job_errors}; commonest cause ({count}x): {cause}"
        )
    return summary.exit_status


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (got {value})")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 (got {text})")
    return value


def _status(args: argparse.Namespace) -> int:
    st = job_status(args.dir)
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        state = "complete" if st["complete"] else "incomplete"
        if st["running_pid"]:
            state += f", running (pid {st['running_pid']})"
        print(
            f"{args.dir}: {state}: {st['done']} done, {st['errors']} errors, "
            f"{st['remaining']} remaining of {st['total']} ({st['runs']} run(s))"
        )
    return 0
