"""`sparkops bench sweep`: the thin edge over bench.runner."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks against a running deployment")
    sub = bench.add_subparsers(dest="bench_command", required=True)
    sweep = sub.add_parser(
        "sweep",
        help="run the batch client at several concurrencies; table, report and plots",
    )
    sweep.add_argument(
        "--endpoint", action="append", required=True, help="vLLM or router base URL (repeatable)"
    )
    sweep.add_argument("--pipeline", type=Path, required=True, help="pipeline YAML")
    sweep.add_argument("--input", type=Path, required=True, help="records (JSONL or CSV)")
    sweep.add_argument(
        "--levels",
        default="1,240,480,960",
        help="comma-separated concurrencies (default 1,240,480,960)",
    )
    sweep.add_argument("--out", type=Path, required=True, help="output directory")
    sweep.add_argument(
        "--cold",
        action="store_true",
        help="reset each vLLM server's prefix cache before every level "
        "(needs VLLM_SERVER_DEV_MODE=1 on the servers)",
    )
    sweep.add_argument("--id-field", default="id")
    sweep.add_argument("--api-key-env", help="environment variable holding the API key")
    sweep.add_argument(
        "--sample-interval",
        type=float,
        default=1.0,
        help="seconds between /metrics samples (default 1)",
    )
    sweep.add_argument("--no-progress", action="store_true", help="no live progress display")
    sweep.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so `sparkops --help` does not load the batch engine and matplotlib.
    from sparkops.bench.runner import SweepConfig, run_sweep
    from sparkops.bench.sweep import parse_levels

    result = run_sweep(
        SweepConfig(
            endpoints=args.endpoint,
            pipeline=args.pipeline,
            input=args.input,
            levels=parse_levels(args.levels),
            out=args.out,
            cold=args.cold,
            id_field=args.id_field,
            api_key_env=args.api_key_env,
            sample_interval=args.sample_interval,
            progress=not args.no_progress,
        )
    )
    console = Console()
    console.print(Markdown(result.report.read_text(encoding="utf-8")))
    console.print(f"report: {result.report}  table: {result.table}")
    return 0
