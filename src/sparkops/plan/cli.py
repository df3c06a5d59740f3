"""`sparkops plan throughput|memory|guard`: the thin I/O edge over the pure planning models.

Reads the config file, parses the hit rate the way people write it (0.887 or 88.7%), and
prints a readable table (plan/tables.py) or, with --json, one JSON object for scripts and
the deploy roles.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from sparkops.cli import command_family
from sparkops.console import stdout_console
from sparkops.errors import UserError
from sparkops.inputs import read_json
from sparkops.metrics.bottleneck import label as bottleneck_label
from sparkops.plan import calibrate
from sparkops.plan.decode import BANDWIDTH_GB_S, decode_ceiling, parse_levels
from sparkops.plan.guard import (
    GuardSettings,
    HostKind,
    check_launch,
    host_facts,
    planned_facts,
    profiles_that_fit,
    settings_of,
)
from sparkops.plan.memory import GB, GIB, dtype_bytes, plan_memory
from sparkops.plan.prefix import plan_shared_prefix
from sparkops.plan.shapes import (
    EngineLayout,
    ModelShape,
    engine_layout,
    kv_dtype_of,
    profile_shape,
    shape_from_config,
)
from sparkops.plan.tables import (
    print_decode,
    print_guard,
    print_memory,
    print_shared_prefix,
    print_throughput,
)
from sparkops.plan.throughput import (
    NOTES_FASTEST_RUN,
    ThroughputPlan,
    plan_throughput,
    predict_level,
    throughput_formula,
)

# A DGX Spark gives vLLM 0.88 x 128 GB for weights plus KV cache (second seed).
DEFAULT_MEMORY_GB = 0.88 * 128
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
DEFAULT_MEMINFO = Path("/proc/meminfo")


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
        "--hit-rate", type=parse_hit_rate, help="prefix-cache hit rate: 0.887, 88.7 or 88.7%%"
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
        type=parse_hit_rate,
        default=0.0,
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
    if calls is not None and calls < 1:
        raise UserError(f"--calls-per-record {calls:g} is below 1: every record makes a call")
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
        "--kv-dtype", choices=["fp8", "bf16", "fp16"], help="default: the profile's, else fp8"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--config", type=Path, help="Hugging Face config.json (or the model folder holding it)"
    )
    source.add_argument(
        "--profile",
        help="a kit profile: its model's shipped shape (plan/shapes.yaml), KV dtype and size",
    )


def register_guard(sub: argparse._SubParsersAction) -> None:
    guard = sub.add_parser(
        "guard",
        help="whole-host memory check: would this profile's launch leave a safe margin?",
        description="Adds up weights, KV cache, activations, the OS reserve (the Windows share "
        "under WSL2) and other GPU processes against this host's memory; exit 2 with the "
        "largest KV cache that fits when the launch would not leave the margin.",
    )
    guard.add_argument("--profile", default="gb10-gemma4-12b-fp8", help="profile name or file")
    guard.add_argument(
        "--meminfo",
        type=Path,
        default=DEFAULT_MEMINFO,
        help="the target's /proc/meminfo (a copy of a Spark's may be read anywhere)",
    )
    guard.add_argument(
        "--host-kind",
        choices=["auto", "native", "wsl2"],
        default="auto",
        help="auto: WSL2 when the kernel release names Microsoft",
    )
    guard.add_argument(
        "--nvidia-smi",
        default="nvidia-smi",
        help="command for the GPU processes and memory (absent: none counted)",
    )
    guard.add_argument(
        "--own-pid", type=int, action="append", default=[], help="this stack's GPU pids"
    )
    defaults = GuardSettings()
    guard.add_argument(
        "--total-gb",
        type=float,
        help="host memory (default: MemTotal; WSL2 128); on a host that is not a GB10 (a "
        "controller) the guard plans a host of this size instead of reading this one",
    )
    guard.add_argument("--os-reserve-gb", type=float, default=defaults.os_reserve_gb)
    guard.add_argument("--windows-share-gb", type=float, default=defaults.windows_share_gb)
    guard.add_argument(
        "--activations-gb", type=float, help="activations and CUDA graphs (gb10 10, cpu 1)"
    )
    guard.add_argument("--margin-gb", type=float, default=defaults.margin_gb)
    guard.add_argument("--wsl-linux-gb", type=float, default=defaults.wsl_linux_gb)
    guard.add_argument(
        "--config", type=Path, help="the model's config.json, for the sequences x context"
    )
    guard.add_argument("--seqs", type=int, help="concurrency to quote (default max_num_seqs)")
    guard.add_argument("--json", action="store_true", help="print the verdict as JSON")
    guard.set_defaults(func=run_guard)


def parse_hit_rate(text: str) -> float:
    """0.887, 88.7 and 88.7% all mean 88.7%; a bare number above 1 is read as a percent."""
    raw = text.strip()
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a hit rate: use 0.887 or 88.7%"
        ) from None
    if raw.endswith("%") or value > 1.0:
        value /= 100.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"hit rate {text!r} is outside 0..100%")
    return value


def load_config(path: Path) -> tuple[dict[str, Any], Path]:
    """Read config.json (given directly or as its model folder)."""
    file = path / "config.json" if path.is_dir() else path
    data = read_json(file, what="model config", fix="pass the model's config.json")
    return data, file.parent


def weights_gb_beside(folder: Path) -> float:
    """Size of the weight files in a model folder, in GB."""
    total = sum(
        f.stat().st_size for f in folder.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES
    )
    if not total:
        raise UserError(
            f"no weight files beside the config in {folder}: pass --weights-gb "
            "(e.g. 16 for an 8B model in BF16, 8.5 in FP8)"
        )
    return total / GB


def run_throughput(args: argparse.Namespace) -> int:
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
        hit_rate=pick(args.hit_rate, shape.hit_rate if shape else None, "--hit-rate"),
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


def run_memory(args: argparse.Namespace) -> int:
    if args.profile is None and args.prompt_tokens is None and args.kv_cache_gib is None:
        config, folder = load_config(args.config)
        weights = args.weights_gb if args.weights_gb is not None else weights_gb_beside(folder)
        plan = plan_memory(
            config,
            kv_dtype=args.kv_dtype or "fp8",
            memory_gb=args.memory_gb,
            weights_gb=weights,
            seqs=args.seqs,
            context=args.context,
        )
        return _show(plan, print_memory, as_json=args.json)
    for flag, value in (
        ("--block-size", args.block_size),
        ("--max-num-batched-tokens", args.max_num_batched_tokens),
    ):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be a positive number of tokens (got {value})")
    shape, kv_dtype, kv_bytes = model_source(args)
    if args.kv_cache_gib is not None:
        kv_bytes = int(args.kv_cache_gib * GIB)
    if kv_bytes is None:
        weights = shape.weights_gb or 0.0
        kv_bytes = int((args.memory_gb - weights) * GB)
    shared = plan_shared_prefix(
        shape,
        width=dtype_bytes(kv_dtype),
        kv_cache_bytes=kv_bytes,
        seqs=args.seqs,
        prompt_tokens=args.prompt_tokens or args.context,
        shared_fraction=args.shared,
        output_tokens=args.output_tokens,
        prefixes=args.prefixes,
        block_size=args.block_size,
        kv_dtype=kv_dtype,
    )
    max_len, batched = args.context, 8192  # vLLM's own default batch for a --config
    in_flight = 2 if args.async_scheduling else 1
    if args.profile is not None:
        from sparkops.profiles import async_scheduling_flag, load_profile

        profile = load_profile(args.profile)
        vllm_args = profile.vllm
        max_len, batched = vllm_args.max_model_len, vllm_args.max_num_batched_tokens or batched
        in_flight = 2 if (args.async_scheduling or async_scheduling_flag(profile)) else 1
    if args.max_num_batched_tokens is not None:
        batched = args.max_num_batched_tokens
    layout = engine_layout(
        shape,
        width=dtype_bytes(kv_dtype),
        kv_cache_bytes=kv_bytes,
        max_model_len=max_len,
        max_num_batched_tokens=batched,
        base_block=args.block_size,
        batches_in_flight=in_flight,
    )
    return _show(_WithLayout(shared, layout), _print_with_layout, as_json=args.json)


class _WithLayout:
    """A shared-prefix plan and the KV-cache layout vLLM will report at start for it."""

    def __init__(self, plan: Any, layout: EngineLayout) -> None:
        self.plan, self.layout = plan, layout

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.plan.as_dict())
        out["engine_kv_tokens"] = self.layout.reported_tokens
        out["engine_blocks"] = self.layout.num_blocks
        out["engine_groups"] = [list(g) for g in self.layout.groups]
        return out


def _print_with_layout(both: _WithLayout, console: Console) -> None:
    print_shared_prefix(both.plan, console)
    lay = both.layout
    sizes = sorted({g[1] for g in lay.groups})
    console.print(
        f"vLLM will report {lay.reported_tokens:,} KV-cache tokens ({lay.max_concurrency:.2f}x "
        f"at full context): {lay.num_blocks:,} blocks in {len(lay.groups)} group(s) of "
        f"{', '.join(map(str, sizes))}-token blocks; that is its worst case per request, not "
        "what the shared prompts above hold."
    )


def model_source(args: argparse.Namespace) -> tuple[ModelShape, str, int | None]:
    """The shape, KV dtype and KV cache bytes from --profile or --config (+ --weights-gb)."""
    if args.profile is not None:
        shape, profile = profile_shape(args.profile)
        kv_dtype = args.kv_dtype or kv_dtype_of(profile)
        if args.weights_gb is not None:
            shape = shape.model_copy(update={"weights_gb": args.weights_gb})
        return shape, kv_dtype, profile.vllm.kv_cache_memory_bytes
    config, folder = load_config(args.config)
    weights = args.weights_gb
    if weights is None:
        try:
            weights = weights_gb_beside(folder)
        except UserError:
            weights = None
    return shape_from_config(config, weights), args.kv_dtype or "fp8", None


def run_decode(args: argparse.Namespace) -> int:
    shape, kv_dtype, _ = model_source(args)
    ceiling = decode_ceiling(
        shape,
        width=dtype_bytes(kv_dtype),
        context=args.context,
        bandwidth_gb_s=args.bandwidth_gb_s or BANDWIDTH_GB_S[args.machine],
        levels=tuple(parse_levels(args.levels)),
    )
    return _show(ceiling, print_decode, as_json=args.json)


def _show(plan: Any, table: Callable[[Any, Console], None], *, as_json: bool) -> int:
    """One plan to stdout: its as_dict() as JSON for scripts, else the readable table."""
    if as_json:
        print(json.dumps(plan.as_dict(), indent=2))
    else:
        table(plan, stdout_console())
    return 0


def _nvidia_smi(command: str, query: str) -> str:
    """Output of one nvidia-smi query, or "" where the tool is absent or fails."""
    argv = [*shlex.split(command), query, "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (FileNotFoundError, PermissionError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot read {what} {path} ({err.strerror}): pass --meminfo") from None


def run_guard(args: argparse.Namespace) -> int:
    from sparkops.profiles import available_profiles, load_profile

    profile = load_profile(args.profile)
    osrelease = ""
    if args.host_kind == "auto":
        try:
            osrelease = Path("/proc/sys/kernel/osrelease").read_text(encoding="utf-8")
        except OSError:
            osrelease = ""
    gpu_total = _nvidia_smi(args.nvidia_smi, "--query-gpu=memory.total")
    settings = settings_of(args, prefix="")
    # A GB10 answers nvidia-smi (memory.total "[N/A]" on a DGX Spark); a controller without
    # one is not the target, and its own /proc/meminfo says nothing about the Spark's.
    off_target = (
        profile.platform == "gb10" and not gpu_total.strip() and args.meminfo == DEFAULT_MEMINFO
    )
    if off_target and args.total_gb is None:
        raise UserError(
            f"this host answers no nvidia-smi: it is not the GB10 that {profile.name} runs "
            f"on, and its memory says nothing about the Spark's. Run this on the Spark "
            f"(sparkops plan guard --profile {profile.name}), or plan for one from here with "
            "--total-gb 128 (--total-gb 64 for a 64 GB RTX Spark, with --host-kind wsl2 under "
            "Windows)"
        )
    if off_target:
        kind: HostKind = "wsl2" if args.host_kind == "wsl2" else "native"
        facts = planned_facts(kind, args.total_gb)
        host = f"a {args.total_gb:g} GB {'WSL2 ' if kind == 'wsl2' else ''}host (--total-gb)"
    else:
        facts = host_facts(
            meminfo=_read(args.meminfo, "memory file"),
            osrelease=osrelease,
            kind=args.host_kind,
            compute_apps=_nvidia_smi(
                args.nvidia_smi, "--query-compute-apps=pid,process_name,used_memory"
            ),
            gpu_total=gpu_total,
            own_pids=args.own_pid,
        )
        host = "this host"
    config = load_config(args.config)[0] if args.config else None
    verdict = check_launch(profile, facts, settings, host=host, hf_config=config, seqs=args.seqs)
    if not verdict.ok:
        bundled = [load_profile(name) for name in available_profiles()]
        fits = profiles_that_fit(profile, facts, settings, bundled)
        verdict = replace(
            verdict,
            message=verdict.message
            + (
                f"; or use a bundled profile that fits here: {', '.join(f.name for f in fits)}"
                if fits
                else "; no bundled profile fits here"
            ),
        )
    if args.json:
        print(json.dumps(verdict.as_dict(), indent=2))
        if not verdict.ok:
            print(f"sparkops: error: {verdict.message}", file=sys.stderr)
            return 2
        return 0
    if not verdict.ok:
        raise UserError(verdict.message)
    print_guard(verdict, stdout_console())
    return 0
