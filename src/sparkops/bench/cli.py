"""`sparkops bench sweep`: the thin edge over bench.runner."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown

from sparkops.batch.options import add_job_options, job_config, job_settings
from sparkops.bench.sweep import LEVEL_ONE_RECORDS
from sparkops.cli import command_family


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = command_family(subparsers, "bench", "benchmarks against a running deployment")
    sweep = sub.add_parser(
        "sweep",
        help="run the batch client at several concurrencies; table, report and plots",
    )
    sweep.add_argument("--pipeline", type=Path, required=True, help="pipeline YAML")
    sweep.add_argument("--input", type=Path, required=True, help="records (JSONL or CSV)")
    sweep.add_argument(
        "--levels",
        default="1,240,480,960",
        help="comma-separated concurrencies, one job each (batch run's --concurrency)",
    )
    sweep.add_argument(
        "--out", type=Path, required=True, help="output directory (one job directory per level)"
    )
    sweep.add_argument(
        "--cold",
        action="store_true",
        help="reset each vLLM server's prefix cache before every level "
        "(needs VLLM_SERVER_DEV_MODE=1 on the servers)",
    )
    sweep.add_argument(
        "--limit",
        type=positive_count,
        metavar="N",
        help="records per level: the first N of the input (default: all of it)",
    )
    sweep.add_argument(
        "--level-one-limit",
        type=positive_count,
        metavar="N",
        default=LEVEL_ONE_RECORDS,
        help="records at concurrency 1, one at a time (default %(default)s; "
        "--limit applies when smaller)",
    )
    sweep.add_argument(
        "--profile",
        help="the serving profile: its model's shape draws the decode ceiling beside the "
        "measured points (with --machine)",
    )
    sweep.add_argument(
        "--machine",
        choices=["gb10", "h200"],
        help="memory bandwidth for the decode ceiling (gb10 273 GB/s, h200 4,800 GB/s)",
    )
    # Every other option is a field of the job's schema (batch/options.py), as in batch run.
    add_job_options(sweep, "sweep")
    sweep.set_defaults(func=run)


def positive_count(text: str) -> int:
    """argparse type: a whole number of records, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def run(args: argparse.Namespace) -> int:
    # Imported here so `sparkops --help` does not load the batch engine and matplotlib.
    from sparkops.bench.runner import SweepConfig, run_sweep
    from sparkops.plan.decode import BANDWIDTH_GB_S, parse_levels

    settings = job_settings(args, "sweep")
    # the settings every level runs with, checked once before any level (one line, exit 2)
    job_config(input=args.input, out=args.out, pipeline=args.pipeline, **settings)
    result = run_sweep(
        SweepConfig(
            pipeline=args.pipeline,
            input=args.input,
            levels=parse_levels(args.levels),
            out=args.out,
            cold=args.cold,
            limit=args.limit,
            level_one_limit=args.level_one_limit,
            profile=args.profile,
            bandwidth_gb_s=BANDWIDTH_GB_S[args.machine] if args.machine else None,
            job=settings,
        )
    )
    console = Console()
    console.print(Markdown(result.report.read_text(encoding="utf-8")))
    console.print(f"report: {result.report}  table: {result.table}")
    return 0
