"""`sparkops batch run|status`."""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

from sparkops.batch.api.server import register_serve
from sparkops.batch.exporter import register_metrics
from sparkops.batch.job import run_job
from sparkops.batch.options import add_job_options, job_config, job_settings
from sparkops.batch.verify import register_verify
from sparkops.cli import command_family
from sparkops.errors import JobStopped, UserError
from sparkops.files import open_private
from sparkops.jobdir.status import job_status, status_line
from sparkops.jobunit.cli import register as register_unit_commands
from sparkops.jobunit.cli import unit_json, unit_sentence
from sparkops.pipeline import table
from sparkops.pipeline.spec import load_pipeline
from sparkops.privacy import redact

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
    sub = command_family(subparsers, "batch", "run a batch job through a pipeline (resumable)")

    run = sub.add_parser(
        "run",
        help="run or resume a job; re-run the same command to resume",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Every option is a field of the job's schema (batch/options.py JobConfig): its type,
    # default, bounds and help are declared there, once, for this command and `bench sweep`.
    add_job_options(run, "run")
    run.set_defaults(func=_run)

    status = sub.add_parser("status", help="how far a job got")
    status.add_argument("dir", type=Path, help="the job folder (batch run's --out)")
    status.add_argument("--json", action="store_true", help="print the status as one JSON object")
    status.set_defaults(func=_status)

    register_serve(sub)  # `sparkops batch serve`: OpenAI's Batch API (batch/api/)
    register_verify(sub)  # `sparkops batch verify`: the job's files against their seals
    register_metrics(sub)  # `sparkops batch metrics`: the job's Prometheus metrics (exporter.py)
    register_unit_commands(sub)  # wait-ready, notify, units: the job's systemd unit (jobunit/)


def _run(args: argparse.Namespace) -> int:
    try:
        return _run_job(args)
    except (UserError, JobStopped, BrokenPipeError):  # a closed pipe: sparkops.cli
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
            fh.write(redact("".join(traceback.format_exception(err))))
        where = f"traceback in {out / CRASH_LOG}"
    except OSError:
        pass
    return (
        f"internal error ({type(err).__name__}); finished records are kept and the same "
        f"command resumes; please report it ({where})"
    )


def _run_job(args: argparse.Namespace) -> int:
    config = job_config(**job_settings(args, "run"))
    summary = run_job(config)
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
    if config.pipeline is not None:  # results.csv, and the answers that could not be read
        table.write_table(summary.out, load_pipeline(config.pipeline))
        if line := table.unparsed_line(summary.out):
            print(line)
    return summary.exit_status


def _status(args: argparse.Namespace) -> int:
    st = job_status(args.dir)
    if args.json:  # "unit": the job's systemd unit where batch.yml installed one (jobunit/)
        print(json.dumps({**st.as_dict(), "unit": unit_json(args.dir)}, indent=2))
    else:
        print(status_line(args.dir, st) + unit_sentence(args.dir))
    return 0
