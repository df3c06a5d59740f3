"""The `sparkops` command line: parses arguments and hands each command to its module.

Each command family lives in its own module exposing `register(subparsers)`; this file only
lists them, so adding a command never means editing another command's code.

Conventions every command gets from here: `--version`; every option's default shown in its
`--help`; one line on stderr and a documented exit status for anything a user can cause (2
usage or configuration, 1 stopped, 130 interrupted); and output piped into a reader that
stops early (`sparkops ... | head -1`) ends quietly with 141, as a shell reports a command
ended by SIGPIPE, instead of a BrokenPipeError traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from typing import TextIO

from sparkops import __version__
from sparkops.errors import Advice, Interrupted, JobStopped, UserError
from sparkops.privacy import RedactingStream

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
# The top-level commands each family registers. A command line that names one loads only its
# family: loading all eight took 1.7 s of every command on the 2-core test machine, the render
# family alone 0.4 s (tests/unit/test_cli_conventions.py checks this table against
# what the modules register).
COMMANDS = {
    "local": "sparkops.local.cli",
    "demo": "sparkops.local.cli",
    "plan": "sparkops.plan.cli",
    "compare": "sparkops.compare.cli",
    "bench": "sparkops.bench.cli",
    "render": "sparkops.render.cli",
    "batch": "sparkops.batch.cli",
    "report": "sparkops.report.cli",
    "pipeline": "sparkops.pipeline.cli",
}


EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE
_PYTHON_SHOWWARNING = warnings.showwarning


def command_family(
    subparsers: argparse._SubParsersAction, name: str, help: str
) -> argparse._SubParsersAction:
    """`sparkops NAME SUB ...`: the parser of a command family and the sub-commands it holds.

    The sub-command is required, so `sparkops NAME` alone is a usage error (exit 2, the
    sub-commands listed, "required: NAME_command") rather than a parse with no handler
    (`args.func` unset). Each family's `register` calls this; it imports nothing of theirs."""
    family = subparsers.add_parser(name, help=help)
    return family.add_subparsers(dest=f"{name}_command", required=True)


class DefaultsShown(argparse.HelpFormatter):
    """Appends what an argument is when not given — "(default: X)", "(default: off)" for a
    flag, "(default: unset)", or "(required)" — unless its help already says its default,
    so `--help` answers that for every option and positional argument."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        words = _default_words(action)
        helps = action.help or ""
        if words is None or "default" in helps.lower() or helps.endswith(words):
            return action.help
        return f"{helps} {words}".lstrip()


def _default_words(action: argparse.Action) -> str | None:
    """What `--help` says an argument is when left out (None: say nothing: --help itself,
    --version, a sub-command list)."""
    if action.default is argparse.SUPPRESS or isinstance(
        action, argparse._SubParsersAction | argparse._SubParsersAction._ChoicesPseudoAction
    ):  # the list of sub-commands and each entry in it: a choice, not an argument
        return None
    if action.required or (not action.option_strings and action.nargs not in ("?", "*")):
        return "(required)"
    default = action.default
    if isinstance(action, argparse._StoreTrueAction) or default is False:
        return "(default: off)"
    if isinstance(action, argparse._StoreFalseAction):
        return "(default: on)"
    if default is None or default == []:
        return "(default: unset)"
    return "(default: %(default)s)"


class RawDefaultsShown(DefaultsShown, argparse.RawDescriptionHelpFormatter):
    """DefaultsShown for parsers whose epilog is laid out by hand (exit status tables)."""


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Give every parser, sub-commands included, the defaults-showing formatter."""
    formatter = parser.formatter_class
    raw = isinstance(formatter, type) and issubclass(
        formatter, argparse.RawDescriptionHelpFormatter
    )
    parser.formatter_class = RawDefaultsShown if raw else DefaultsShown
    for action in parser._actions:
        if not action.help and _default_words(action):
            action.help = _default_words(action)  # argparse prints no help line for None
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: only the family of the command it names, or every family when
    it names none (`--help`, a mistyped command: the usage lists them all)."""
    parser = argparse.ArgumentParser(
        prog="sparkops",
        description="Batch research inference with vLLM on DGX Spark / RTX Spark.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    first = argv[0] if argv else None
    families = [COMMANDS[first]] if first in COMMANDS else COMMAND_MODULES
    for name in families:
        importlib.import_module(name).register(subparsers)
    _show_defaults(parser)
    return parser


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """The kit's deprecations (FutureWarning: a spelling still accepted) and advice (Advice)
    as one line a user reads; any other warning keeps Python's own format (file and line help
    a bug report)."""
    if issubclass(category, FutureWarning | Advice):
        print(f"sparkops: warning: {message}", file=sys.stderr)
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (see the module docstring)."""
    warnings.showwarning = _show_warning
    stderr = sys.stderr
    # credentials in an endpoint URL are never printed, whoever prints it (privacy.redact)
    sys.stderr = RedactingStream(stderr)
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()  # here, so a closed pipe is caught below, not at exit
            sys.stderr = stderr
    except BrokenPipeError:
        return _reader_gone()
    except SystemExit as exit_:
        if _ended_by_closed_pipe(exit_):
            return _reader_gone()
        raise


def _ended_by_closed_pipe(exit_: SystemExit) -> bool:
    """Whether a library ended the command because stdout's reader went away: rich's Console
    answers a BrokenPipeError with SystemExit(1) (`Console.on_broken_pipe`), which a table
    printed into `| head` met, so `plan throughput ... | head` exited 1 instead of 141.
    Its mark is the pipe error being handled when the exit was raised."""
    return isinstance(exit_.__context__, BrokenPipeError)


def _reader_gone() -> int:
    """The reader stopped (`| head`): nothing more can be said on stdout; point it at
    /dev/null so the interpreter's own flush at exit does not report the pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _run(argv: list[str] | None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv).parse_args(argv)
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
