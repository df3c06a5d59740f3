"""`sparkops plan throughput|memory|decode|guard`: the thin I/O edge over the pure planning
models; this file holds the parsers and `plan throughput` (memory and decode:
plan/memory_command.py; guard: plan/guard_command.py).

Reads the config file, parses the hit rate the way people write it (0.887 or 88.7%), and
prints a readable table (plan/tables.py) or, with --json, one JSON object for scripts and
the deploy roles.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from sparkops.cli import command_family
from sparkops.console import stdout_console
from sparkops.errors import UserError
from sparkops.metrics.bottleneck import label as bottleneck_label
from sparkops.plan import bounds, calibrate
from sparkops.plan.decode import BANDWIDTH_GB_S
from sparkops.plan.guard_command import register_guard
from sparkops.plan.memory_command import run_decode, run_memory
from sparkops.plan.tables import print_throughput
from sparkops.plan.throughput import (
    NOTES_FASTEST_RUN,
    ThroughputPlan,
    plan_throughput,
    predict_level,
    throughput_formula,
)

# A DGX Spark gives vLLM 0.88 x 128 GB for weights plus KV cache (second seed).
DEFAULT_MEMORY_GB = 0.88 * 128


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = command_family(subparsers, "plan", "capacity planning: throughput and KV memory")

    tp = sub.add_parser(
        "throughput",
        help="records/min from computed tok/s and prefix-cache hit rate",
        description="Only uncached prompt tokens and generated tokens cost compute.",
    )
    tp.add_argument(
        "--computed-tok-s",
        type=float,
        help="tokens/s the server computes at full load (computed prompt + generated, not "
        "counting cache hits); or calibrate with --from-sweep / --from-report",
    )
    tokens = tp.add_argument_group(
        "tokens",
        "per record (all of its calls), or per call with --calls-per-record (the benchmark "
        "notes: about 1,600 prompt and 125 generated tokens a call, about 2.4 calls a record)",
    )
    tokens.add_argument(
        "--prompt-tokens-per-record", type=float, help="prompt tokens of a record's calls"
    )
    tokens.add_argument(
        "--gen-tokens-per-record", type=float, help="generated tokens of a record's calls"
    )
    tokens.add_argument("--prompt-tokens-per-call", type=float, help="prompt tokens of a call")
    tokens.add_argument("--gen-tokens-per-call", type=float, help="generated tokens of a call")
    tokens.add_argument(
        "--calls-per-record",
        type=float,
        help="calls a record makes on average (early exits make it fractional: the notes' 2.4)",
    )
    retired(tp, "--prompt-tokens", "--prompt-tokens-per-record (or -per-call)")
    retired(tp, "--gen-tokens", "--gen-tokens-per-record (or -per-call)")
    tp.add_argument(
        "--hit-rate",
        help="prefix-cache hit rate: 0.887, 88.7 or 88.7%% (a percent under 1%% is refused: "
        "0.887%% is almost always 88.7%%; write a rate that low as a fraction, 0.00887)",
    )
    calibrate = tp.add_mutually_exclusive_group()
    calibrate.add_argument(
        "--from-sweep",
        type=Path,
        metavar="SWEEP",
        help="calibrate on a sweep level (sweep.json or its folder): its computed tok/s, "
        "and its tokens per record and hit rate unless given",
    )
    calibrate.add_argument(
        "--from-report", type=Path, metavar="REPORT", help="calibrate on a job's report.json"
    )
    tp.add_argument(
        "--level", type=int, help="the --from-sweep level to calibrate on (default: highest)"
    )
    target = tp.add_mutually_exclusive_group()
    target.add_argument(
        "--for-level",
        type=int,
        metavar="N",
        help="predict another level of the same sweep and check against its measurement",
    )
    target.add_argument(
        "--for-report",
        type=Path,
        metavar="REPORT",
        help="predict a measured job (its report.json) and check against its records/min",
    )
    tp.add_argument("--records", type=int, help="job size, for hours_for_records")
    tp.add_argument("--points", type=int, default=10, help="hit-rate points to tabulate")
    tp.add_argument("--json", action="store_true", help="print JSON instead of tables")
    tp.set_defaults(func=run_throughput)

    mem = sub.add_parser(
        "memory",
        help="KV cache: tokens and sequences that fit, and the vLLM flags to use",
    )
    add_model_source(mem)
    mem.add_argument(
        "--weights-gb",
        type=float,
        help="weights in GB (default: the size of the weight files beside config.json)",
    )
    mem.add_argument(
        "--memory-gb",
        type=float,
        default=DEFAULT_MEMORY_GB,
        help="GB given to vLLM for weights + KV cache (default 0.88 x 128)",
    )
    mem.add_argument("--seqs", type=int, default=32, help="concurrent sequences")
    mem.add_argument("--context", type=int, default=8192, help="tokens per sequence")
    shared = mem.add_argument_group(
        "shared prefixes",
        "count each shared opening's blocks once and only the rest per sequence "
        "(the default with --profile)",
    )
    shared.add_argument(
        "--prompt-tokens-per-call", dest="prompt_tokens", type=int, help="prompt tokens of a call"
    )
    shared.add_argument(
        "--shared",
        default="0",
        help="share of each prompt that is a shared opening: 0.9, 90 or 90%% (default 0)",
    )
    shared.add_argument(
        "--gen-tokens-per-call",
        dest="output_tokens",
        type=int,
        default=0,
        help="tokens a call generates (default 0)",
    )
    retired(mem, "--prompt-tokens", "--prompt-tokens-per-call")
    retired(mem, "--output-tokens", "--gen-tokens-per-call")
    shared.add_argument(
        "--prefixes", type=int, default=1, help="different shared openings (pipeline steps)"
    )
    shared.add_argument(
        "--kv-cache-gib",
        type=float,
        help="KV cache size (default: the profile's --kv-cache-memory-bytes, "
        "else memory - weights)",
    )
    engine = mem.add_argument_group(
        "engine", "the vLLM settings its KV-cache report depends on (with --profile: the profile's)"
    )
    engine.add_argument(
        "--max-num-batched-tokens",
        type=int,
        help="vLLM's --max-num-batched-tokens: bounds a sliding layer's charge (default 8192)",
    )
    engine.add_argument(
        "--block-size",
        type=int,
        default=16,
        help="vLLM's base block in tokens: 16 on a GPU, 128 on vLLM-CPU (default 16)",
    )
    engine.add_argument(
        "--async-scheduling",
        action="store_true",
        help="vLLM 0.32 with --async-scheduling: two batches in flight widen a sliding "
        "layer's charge (with --profile: the profile's)",
    )
    mem.add_argument("--json", action="store_true", help="print JSON instead of a table")
    mem.set_defaults(func=run_memory)

    dec = sub.add_parser(
        "decode",
        help="the decode ceiling: generated tok/s against concurrency when bandwidth binds",
        description="Each decode step reads the weights once and every running sequence's KV "
        "cache; past the knee more concurrency buys little decode speed (plan/decode.py).",
    )
    add_model_source(dec)
    dec.add_argument("--weights-gb", type=float, help="weight bytes read per step, decimal GB")
    dec.add_argument(
        "--context",
        type=int,
        required=True,
        help="mean context of a call in flight: its prompt plus half its answer",
    )
    dec.add_argument(
        "--machine",
        choices=sorted(BANDWIDTH_GB_S),
        default="gb10",
        help="memory bandwidth by machine (gb10 273 GB/s, h200 4,800 GB/s)",
    )
    dec.add_argument("--bandwidth-gb-s", type=float, help="memory bandwidth (overrides --machine)")
    dec.add_argument(
        "--levels", default="1,8,32,64,128,240,480,960", help="concurrencies to tabulate"
    )
    dec.add_argument("--json", action="store_true", help="print JSON instead of a table")
    dec.set_defaults(func=run_decode)
    register_guard(sub)


def retired(parser: argparse.ArgumentParser, flag: str, instead: str) -> None:
    """A flag name that meant per record in one planner and per call in another: refused
    with the explicit names, so no figure is read in the wrong unit (hidden from --help)."""

    class Refuse(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
            parser.error(
                f"{flag} is ambiguous (per record or per call?): use {instead}; "
                "every `sparkops plan` token flag names its unit"
            )

    dest = "retired_" + flag.strip("-").replace("-", "_")
    parser.add_argument(flag, action=Refuse, dest=dest, help=argparse.SUPPRESS)


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


def add_model_source(parser: argparse.ArgumentParser) -> None:
    """The model to plan for (--config or --profile) and its KV-cache dtype."""
    parser.add_argument(
        "--kv-dtype",
        choices=["fp8", "bf16", "fp16"],
        help="KV-cache dtype (default: the profile's, else fp8)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config", type=Path, help="Hugging Face config.json (or the model folder holding it)"
    )
    source.add_argument(
        "--profile",
        help="a kit profile: its model's shipped shape (plan/shapes.yaml), KV dtype and size",
    )


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
