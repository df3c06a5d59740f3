"""`sparkops report DIR [--json | --html]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparkops.errors import UserError
from sparkops.jobdir import verification
from sparkops.jobdir.folder import load_manifest
from sparkops.methods.cli import add_methods_options, methods_from_args
from sparkops.report.html import write_html
from sparkops.report.render import markdown, report_json, write_report


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="write report.json, report.md, throughput.png into DIR"
    )
    p.add_argument("dir", type=Path, help="the job folder (batch run's --out)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON (report.json's content) instead of Markdown",
    )
    p.add_argument(
        "--html",
        action="store_true",
        help="write DIR/report.html instead: the report as one self-contained HTML file "
        "(plots inside, nothing fetched when it is opened) and print its path (default: off)",
    )
    add_methods_options(p)  # --methods [--pipeline P.yaml]: DIR/methods.md (methods/)
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    _warn_if_edited(args.dir)
    if (methods := methods_from_args(args)) is not None:  # DIR/methods.md (methods/)
        print(methods)
        return 0
    if args.html:  # report/html.py: a job folder, or a sweep folder
        print(write_html(args.dir))
        return 0
    report = write_report(args.dir)
    if args.json:
        print(report_json(report), end="")
    else:
        print(markdown(report, args.dir.name), end="")
    return 0


def _warn_if_edited(directory: Path) -> None:
    """Say when the job folder's results changed since they were written (jobdir/
    verification.py); not for a folder whose manifest cannot be read, which the command
    refuses next in its own one line (a sweep folder, a corrupt manifest)."""
    try:
        load_manifest(directory)
    except UserError:
        return
    if (edited := verification.warning(directory)) is not None:
        print(f"sparkops: warning: {edited}", file=sys.stderr)
