"""`sparkops plan memory` and `plan decode`: the KV cache a model's shape needs, counted as
vLLM's allocator counts it, and the decode-speed ceiling of its memory traffic."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from sparkops.errors import UserError
from sparkops.plan import bounds
from sparkops.plan.decode import BANDWIDTH_GB_S, decode_ceiling, parse_levels
from sparkops.plan.memory import GB, GIB, dtype_bytes, plan_memory
from sparkops.plan.prefix import CallMix, plan_shared_prefix
from sparkops.plan.shapes import EngineLayout, engine_layout
from sparkops.plan.sources import load_config, model_source, show, weights_gb_beside
from sparkops.plan.tables import print_decode, print_memory, print_shared_prefix


def planned_machine(args: argparse.Namespace) -> tuple[str, float]:
    """The machine a memory or decode plan is for, and its memory in GB: a GB10 for a GB10
    profile (or `plan decode --machine`), else any one host (plan/bounds.py)."""
    machine = getattr(args, "machine", None)
    if machine is not None and args.bandwidth_gb_s is None:
        return bounds.MACHINE_NAMES[machine], bounds.MACHINE_MEMORY_GB[machine]
    if args.profile is not None:
        from sparkops.profiles import load_profile

        if load_profile(args.profile).platform == "gb10":
            return bounds.MACHINE_NAMES["gb10"], bounds.MACHINE_MEMORY_GB["gb10"]
    return "one host", bounds.LARGEST_HOST_GB


def check_memory_options(args: argparse.Namespace) -> float:
    """Refuse figures no plan can describe before the model is read (plan/bounds.py); the
    shared share as a fraction."""
    machine, most_gb = planned_machine(args)
    bounds.machine_gb("--memory-gb", args.memory_gb, most_gb, machine)
    if args.weights_gb is not None:
        bounds.at_least("--weights-gb", args.weights_gb, 0, "GB")
        # a model's whole weights may be larger than one machine (pipeline parallel)
        bounds.machine_gb(
            "--weights-gb", args.weights_gb or None, bounds.LARGEST_HOST_GB, "one host"
        )
    bounds.positive("--kv-cache-gib", args.kv_cache_gib, "give the KV cache's size in GiB")
    for flag, value, low, unit in (
        ("--seqs", args.seqs, 1, "sequence"),
        ("--context", args.context, 1, "token"),
        ("--prompt-tokens-per-call", args.prompt_tokens, 1, "token"),
        ("--gen-tokens-per-call", args.output_tokens, 0, "tokens"),
        ("--prefixes", args.prefixes, 1, "prefix"),
        ("--block-size", args.block_size, 1, "token"),
        ("--max-num-batched-tokens", args.max_num_batched_tokens, 1, "token"),
    ):
        bounds.at_least(flag, value, low, unit)
    return bounds.rate("--shared", args.shared, "shared share")


def run_memory(args: argparse.Namespace) -> int:
    shared_fraction = check_memory_options(args)
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
        return show(plan, print_memory, as_json=args.json)
    shape, kv_dtype, kv_bytes = model_source(args)
    weights = shape.weights_gb or 0.0
    if args.kv_cache_gib is not None:
        kv_bytes = int(args.kv_cache_gib * GIB)
        bounds.kv_cache_fits(
            kv_bytes, weights, args.memory_gb, f"--kv-cache-gib {args.kv_cache_gib:g}"
        )
    elif kv_bytes is not None:
        bounds.kv_cache_fits(
            kv_bytes, weights, args.memory_gb, f"profile {args.profile}'s KV cache"
        )
    elif weights >= args.memory_gb:
        raise UserError(
            f"the weights ({weights:g} GB) leave no room for a KV cache in the "
            f"{args.memory_gb:g} GB vLLM gets: give --kv-cache-gib, --memory-gb of the machine, "
            "or smaller (quantised) weights"
        )
    else:
        kv_bytes = int((args.memory_gb - weights) * GB)
    calls = CallMix(
        seqs=args.seqs,
        prompt_tokens=args.context if args.prompt_tokens is None else args.prompt_tokens,
        shared_fraction=shared_fraction,
        output_tokens=args.output_tokens,
        prefixes=args.prefixes,
    )
    shared = plan_shared_prefix(
        shape,
        calls,
        width=dtype_bytes(kv_dtype),
        kv_cache_bytes=kv_bytes,
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
    return show(_WithLayout(shared, layout), _print_with_layout, as_json=args.json)


@dataclass(frozen=True)
class _WithLayout:
    """A shared-prefix plan and the KV-cache layout vLLM will report at start for it."""

    plan: Any
    layout: EngineLayout

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


def run_decode(args: argparse.Namespace) -> int:
    machine, most_gb = planned_machine(args)
    if args.bandwidth_gb_s is not None:
        bounds.bandwidth(args.bandwidth_gb_s)
    if args.weights_gb is not None:
        bounds.at_least("--weights-gb", args.weights_gb, 0, "GB")
        bounds.machine_gb("--weights-gb", args.weights_gb or None, most_gb, machine)
    bounds.at_least("--context", args.context, 1, "token")
    shape, kv_dtype, _ = model_source(args)
    ceiling = decode_ceiling(
        shape,
        width=dtype_bytes(kv_dtype),
        context=args.context,
        bandwidth_gb_s=args.bandwidth_gb_s or BANDWIDTH_GB_S[args.machine],
        levels=tuple(parse_levels(args.levels)),
    )
    return show(ceiling, print_decode, as_json=args.json)
