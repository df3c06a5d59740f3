"""`sparkops report DIR --methods [--pipeline P.yaml]`: the options and their handling, so the
report's command line registers them in one call (methods/document.py writes the file)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sparkops.errors import UserError
from sparkops.methods.document import write_job_methods


def add_methods_options(parser: argparse.ArgumentParser) -> None:
    """`--methods` and `--pipeline` for `sparkops report`."""
    parser.add_argument(
        "--methods",
        action="store_true",
        help="write DIR/methods.md instead: the methods section a paper can take, from the job "
        "folder alone (TRIPOD-LLM's order; marked places for what the kit cannot know), and "
        "print its path",
    )
    parser.add_argument(
        "--pipeline",
        type=Path,
        metavar="P.yaml",
        help="with --methods, for a job folder from before the kit kept its pipeline (DIR/"
        "pipeline/): the job's pipeline, refused unless its fingerprint is the job's "
        "(manifest.json); beside the folder's own copy it must be the same files",
    )


def methods_from_args(args: argparse.Namespace) -> Path | None:
    """`report DIR --methods [--pipeline P.yaml]`: the methods.md written (None without
    --methods; --pipeline alone is refused, as it would do nothing)."""
    if not args.methods:
        if args.pipeline is not None:
            raise UserError("--pipeline fills the methods section: pass --methods with it")
        return None
    return write_job_methods(args.dir, args.pipeline)
