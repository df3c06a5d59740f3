"""`sparkops batch run|status`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparkops.batch.job import JobConfig, run_job
from sparkops.batch.policy import DEFAULT_POLICY, POLICIES
from sparkops.batch.status import job_status


def register(subparsers: argparse._SubParsersAction) -> None:
    batch = subparsers.add_parser("batch", help="run a batch job through a pipeline (resumable)")
    sub = batch.add_subparsers(dest="batch_command", required=True)

    run = sub.add_parser("run", help="run or resume a job; re-run the same command to resume")
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
        "--retry-for", type=float, default=1800.0, help="give up on a call after retrying this long"
    )
    run.add_argument(
        "--sample-interval", type=float, default=5.0, help="seconds between /metrics samples"
    )
    run.add_argument("--no-progress", action="store_true", help="no live progress display")
    run.set_defaults(func=_run)

    status = sub.add_parser("status", help="how far a job got")
    status.add_argument("dir", type=Path)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)


def _run(args: argparse.Namespace) -> int:
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
        )
    )
    rpm = f"{summary.records_per_min:,.0f}" if summary.records_per_min else "-"
    hit = f"{summary.hit_rate:.1%}" if summary.hit_rate is not None else "-"
    print(
        f"{summary.out}: {summary.done} done, {summary.errors} errors, {summary.skipped} already "
        f"finished, {summary.calls} calls, {rpm} records/min, prefix cache hit {hit}"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    st = job_status(args.dir)
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        state = "complete" if st["complete"] else "incomplete"
        print(
            f"{args.dir}: {state}: {st['done']} done, {st['errors']} errors, "
            f"{st['remaining']} remaining of {st['total']} ({st['runs']} run(s))"
        )
    return 0
