"""The options of a batch job, declared once for every command that runs one.

`sparkops batch run` runs one job; `sparkops bench sweep` runs one job per concurrency level.
Both take their job options from `JOB_OPTIONS`, so a default or a help text cannot drift
between them (they had: `--sample-interval` 5 s in one and 1 s in the other, and the sweep
lacked `--retry-for` and `--schedule`). `add_job_options` declares them on a parser and
`job_settings` turns the parsed values into `JobConfig` keyword arguments. What differs stays
with its command: what to run (`--input`, `--pipeline`, `--out`) and how many calls at once
(`batch run --concurrency`, `bench sweep --levels`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.batch.policy import DEFAULT_POLICY, POLICIES


def non_negative_int(text: str) -> int:
    """argparse type: a whole number of at least 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (got {value})")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 (got {text})")
    return value


@dataclass(frozen=True)
class JobOption:
    """One option: its flag, the JobConfig field it sets, argparse's keyword arguments."""

    flag: str
    config_field: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    convert: Callable[[Any], Any] = lambda value: value

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


JOB_OPTIONS: tuple[JobOption, ...] = (
    JobOption(
        "--endpoint",
        "endpoints",
        {"action": "append", "required": True, "help": "vLLM or LiteLLM base URL (repeatable)"},
    ),
    JobOption(
        "--schedule",
        "policy",
        {
            "choices": sorted(POLICIES),
            "default": DEFAULT_POLICY,
            "help": "which ready call goes next: fifo (arrival order) or step-aware (favour the "
            "step whose prefix is hottest in the cache, bounded wait)",
        },
    ),
    JobOption(
        "--schedule-max-wait",
        "max_wait",
        {
            "type": int,
            "help": "step-aware: a ready call goes next once this many newer calls became ready "
            "(default: the concurrency, at least 64)",
        },
    ),
    JobOption("--api-key-env", "api_key_env", {"help": "environment variable holding the API key"}),
    JobOption("--id-field", "id_field", {"default": "id", "help": "record id field"}),
    JobOption(
        "--restart",
        "restart",
        {"action": "store_true", "help": "start over; old files kept in DIR/previous-*/"},
    ),
    JobOption(
        "--request-timeout",
        "request_timeout",
        {"type": float, "default": 600.0, "help": "seconds per request"},
    ),
    JobOption(
        "--retry-for",
        "retry_for",
        {
            "type": positive_seconds,
            "default": 1800.0,
            "help": "stop the job (resumable, exit 1) when calls fail and no endpoint has "
            "answered for this many seconds; a call retried this long while others succeed "
            "becomes a record error",
        },
    ),
    JobOption(
        "--fail-fast",
        "fail_fast",
        {
            "type": non_negative_int,
            "default": 20,
            "metavar": "N",
            "help": "stop (resumable, exit 1) when the first N records all fail with one cause "
            "(a wrong API key, a field the records lack), without recording them as finished; "
            "0 turns this off",
        },
    ),
    JobOption(
        "--sample-interval",
        "sample_interval",
        {"type": float, "default": 5.0, "help": "seconds between /metrics samples"},
    ),
    JobOption(
        "--stall-after",
        "stall_after",
        {
            "type": float,
            "metavar": "S",
            "help": "an endpoint with calls in flight and no progress (no answer, its /metrics "
            "token counters still) for S seconds is stalled: no new calls, its in-flight calls "
            "go to the other endpoints, it is probed again later; with every endpoint stalled "
            "the job stops (resumable, exit 1). Default: the longest of 120 s, 4 sample "
            "intervals and 3 times the slowest answer so far; 0 turns this off",
        },
    ),
    JobOption(
        "--strict-serving",
        "strict_serving",
        {
            "action": "store_true",
            "help": "stop (resumable, exit 1) when an endpoint's vLLM version, model, max length "
            "or cache configuration changes during the job (without it the change is recorded "
            "in DIR/serving.jsonl, shown and reported, and the job goes on)",
        },
    ),
    JobOption(
        "--stack-record",
        "stack_record",
        {
            "type": Path,
            "metavar": "FILE",
            "help": "the deploy's stack-record.json (next to compose.yml) to keep in the job's "
            "serving record: profile, image, rendered command and environment (no secrets)",
        },
    ),
    JobOption(
        "--no-progress",
        "progress",
        {"action": "store_true", "help": "no live progress display"},
        convert=lambda value: not value,
    ),
)


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """Declare every shared job option on `parser`."""
    for option in JOB_OPTIONS:
        parser.add_argument(option.flag, **option.kwargs)


def job_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed shared options as JobConfig keyword arguments."""
    return {
        option.config_field: option.convert(getattr(args, option.dest)) for option in JOB_OPTIONS
    }
