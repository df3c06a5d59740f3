"""The `sparkops` command line: parses arguments and hands each command to its module.

Each command family lives in its own module exposing `register(subparsers)`; this file only
lists them, so adding a command never means editing another command's code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sparkops.errors import Interrupted, JobStopped, UserError

# One line per command family; each module defines register(subparsers).
COMMAND_MODULES = [
    "sparkops.local.cli",
    "sparkops.plan.cli",
    "sparkops.compare.cli",
    "sparkops.bench.cli",
    "sparkops.render.cli",
    "sparkops.batch.cli",
    "sparkops.report.cli",
    "sparkops.pipeline.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkops",
        description="Batch research inference with vLLM on DGX Spark / RTX Spark.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command modules load (seconds on a busy box)
        print("sparkops: interrupted before anything started", file=sys.stderr)
        return 130
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"sparkops: error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"sparkops: {err}", file=sys.stderr)
        return err.exit_status
    except JobStopped as err:
        print(f"sparkops: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sparkops: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
