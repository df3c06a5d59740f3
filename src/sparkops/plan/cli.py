"""`sparkops plan throughput|memory|decode|guard`: the thin I/O edge over the pure planning
models; this file registers the planners (their options are declared from their settings in
plan/options.py) and runs `plan throughput` (memory and decode: plan/memory_command.py;
guard: plan/guard_command.py).

Reads the config file, parses the hit rate the way people write it (0.887 or 88.7%), and
prints a readable table (plan/tables.py) or, with --json, one JSON object for scripts and
the deploy roles.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

from sparkops.cli import command_family
from sparkops.console import stdout_console
from sparkops.errors import UserError
from sparkops.metrics.bottleneck import label as bottleneck_label
from sparkops.plan import bounds, calibrate
from sparkops.plan.guard_command import register_guard
from sparkops.plan.memory_command import run_decode, run_memory
from sparkops.plan.options import (
    DecodeSettings,
    MemorySettings,
    PlannerSettings,
    ThroughputSettings,
    add_options,
)
from sparkops.plan.tables import print_throughput
from sparkops.plan.throughput import (
    NOTES_FASTEST_RUN,
    ThroughputPlan,
    plan_throughput,
    predict_level,
    throughput_formula,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """`sparkops plan`: each planner's options declared from its settings (plan/options.py)."""
    sub = command_family(subparsers, "plan", "capacity planning: throughput and KV memory")
    planners: list[tuple[type[PlannerSettings], Callable[[argparse.Namespace], int]]] = [
        (ThroughputSettings, run_throughput),
        (MemorySettings, run_memory),
        (DecodeSettings, run_decode),
    ]
    for settings, run in planners:
        command = settings.command
        parser = sub.add_parser(command.name, help=command.help, description=command.description)
        add_options(parser, settings)
        parser.set_defaults(func=run)
    register_guard(sub)


def tokens_per_record(
    args: argparse.Namespace, measured: calibrate.Measured | None
) -> tuple[float, float, str | None]:
    """(prompt, generated) tokens per record from per-record or per-call flags, falling back
    on a measured run; and how the per-call figures were multiplied, for the output."""
    calls = args.calls_per_record
    per_call = (args.prompt_tokens_per_call, args.gen_tokens_per_call)
    if calls is not None and not 1 <= calls < math.inf:
        raise UserError(f"--calls-per-record {calls:g} is not 1 or more: every record makes a call")
    if calls is None and any(v is not None for v in per_call):
        raise UserError(
            "per-call tokens need --calls-per-record N (the average calls a record makes; "
            "the benchmark notes: about 2.4), or give --prompt-tokens-per-record and "
            "--gen-tokens-per-record"
        )
    if calls is not None and all(v is None for v in per_call):
        raise UserError(
            "--calls-per-record multiplies per-call tokens: add --prompt-tokens-per-call "
            "and --gen-tokens-per-call"
        )
    steps = []
    out = []
    for kind, record, call, from_run in (
        ("prompt", args.prompt_tokens_per_record, args.prompt_tokens_per_call,
         measured.prompt_tokens if measured else None),
        ("gen", args.gen_tokens_per_record, args.gen_tokens_per_call,
         measured.gen_tokens if measured else None),
    ):  # fmt: skip
        if record is not None and call is not None:
            raise UserError(
                f"give --{kind}-tokens-per-record or --{kind}-tokens-per-call, not both"
            )
        if call is not None:
            assert calls is not None
            record = call * calls
            steps.append(f"{call:,.0f} x {calls:g} calls = {record:,.0f} {kind} tokens a record")
        elif record is None:
            record = from_run
        if record is None:
            raise UserError(
                f"--{kind}-tokens-per-record (or --{kind}-tokens-per-call with "
                "--calls-per-record) is needed: no measured run gives it"
            )
        out.append(record)
    return out[0], out[1], "; ".join(steps) or None


def check_throughput_options(args: argparse.Namespace) -> float | None:
    """Refuse figures no job can have before anything is read or computed (plan/bounds.py);
    the hit rate as a fraction (None: not given)."""
    bounds.positive(
        "--computed-tok-s",
        args.computed_tok_s,
        "give the prompt+generation tok/s the server computes at full load (e.g. from a sweep)",
    )
    for flag in ("prompt-tokens-per-record", "prompt-tokens-per-call"):
        bounds.at_least(f"--{flag}", getattr(args, flag.replace("-", "_")), 0, "tokens")
    for flag in ("gen-tokens-per-record", "gen-tokens-per-call"):
        bounds.at_least(f"--{flag}", getattr(args, flag.replace("-", "_")), 1, "token")
    bounds.at_least("--records", args.records, 1, "record")
    bounds.at_least("--points", args.points, 0, "points")
    if args.hit_rate is None:
        return None
    return bounds.rate("--hit-rate", args.hit_rate, "hit rate")


def run_throughput(args: argparse.Namespace) -> int:
    hit_rate = check_throughput_options(args)
    calibration = target = None
    if args.from_sweep is not None:
        calibration = calibrate.from_sweep(args.from_sweep, args.level)
    elif args.from_report is not None:
        calibration = calibrate.from_report(args.from_report)
    elif args.level is not None or args.for_level is not None:
        raise UserError("--level and --for-level read a sweep: add --from-sweep SWEEP")
    if args.for_level is not None:
        if args.from_sweep is None:
            raise UserError("--for-level reads a sweep: add --from-sweep SWEEP")
        target = calibrate.from_sweep(args.from_sweep, args.for_level)
    elif args.for_report is not None:
        target = calibrate.from_report(args.for_report)
    shape = target or calibration

    def pick(given: float | None, measured: float | None, flag: str) -> float:
        value = given if given is not None else measured
        if value is None:
            raise UserError(f"{flag} is needed (no measured run gives it)")
        return value

    computed = pick(
        args.computed_tok_s, calibration.computed_tok_s if calibration else None, "--computed-tok-s"
    )
    if calibration and target and target.bottleneck != calibration.bottleneck:
        prediction = predict_level(
            computed_tok_s=computed,
            calibrated_bottleneck=calibration.bottleneck or "unknown",
            bottleneck=target.bottleneck,
            prompt_tokens=target.prompt_tokens,
            gen_tokens=target.gen_tokens,
            hit_rate=target.hit_rate,
        )
        raise UserError(
            f"cannot predict {target.label} from {calibration.label}: {prediction.reason}; "
            "calibrate on a run with the same bottleneck"
        )
    prompt, gen, per_call = tokens_per_record(args, shape)
    plan = plan_throughput(
        computed_tok_s=computed,
        prompt_tokens=prompt,
        gen_tokens=gen,
        hit_rate=pick(hit_rate, shape.hit_rate if shape else None, "--hit-rate"),
        records=args.records,
        table_points=args.points,
    )
    check = check_against(plan, calibration, target or calibration)
    formula = throughput_formula(plan, per_call)
    if args.json:
        extra = {"per_call": per_call, "formula": formula, "notes": NOTES_FASTEST_RUN}
        print(json.dumps({**plan.as_dict(), **extra, "check": check}, indent=2))
        return 0
    console = stdout_console()
    print_throughput(plan, console, formula)
    if check:
        console.print(check["sentence"], soft_wrap=True, markup=False, highlight=False)
    return 0


def check_against(
    plan: ThroughputPlan, calibration: calibrate.Measured | None, target: calibrate.Measured | None
) -> dict[str, Any] | None:
    """The prediction against the measured records/min of the run it describes."""
    if calibration is None or target is None or not target.records_per_min:
        return None
    error = plan.records_per_min / target.records_per_min - 1
    return {
        "calibration": calibration.label,
        "calibration_bottleneck": calibration.bottleneck,
        "target": target.label,
        "target_bottleneck": target.bottleneck,
        "measured_records_per_min": target.records_per_min,
        "predicted_records_per_min": plan.records_per_min,
        "error": error,
        "sentence": (
            f"Check: calibrated on {calibration.label} (bound by the "
            f"{bottleneck_label(calibration.bottleneck)}), "
            f"predicted {plan.records_per_min:,.1f} records/min for {target.label}, measured "
            f"{target.records_per_min:,.1f} ({error:+.1%})."
        ),
    }
