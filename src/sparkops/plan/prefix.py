"""KV cache use when every call shares its opening, block by block as vLLM allocates it.

With prefix caching, the calls in flight that share a step's instructions point at the same
cached blocks; only what follows the last whole shared block is each sequence's own: the
shared text's tail up to the block edge (recomputed every call, as the seed notes), the
record's own prompt text and the answer being written. Charging every sequence its whole
context (plan.memory's `--context` view) reads the seed's own setting (1,000 in flight,
~1,600-token calls ~90% shared, ~125 out) as 279-677% of the cache.

The count follows vLLM's allocator (0.26, read for the served check of 2026-12-03;
plan/shapes.engine_layout): one pool of blocks shared by every KV-cache group, pages unified
so a group's block size in tokens is its own (Gemma 4: 16 in the sliding groups, 64 in the
full one); a sequence holds whole blocks of every group, a sliding group only those that
reach into its window (older ones are freed); shared blocks count once, and prefix hits
align to the groups' least common block size. vLLM's KV usage is used blocks over the pool,
and cached blocks that no running call references count as free.

Two figures for `seqs` calls all running, their answers at every stage of being written
(continuous batching staggers them: even equal-length answers do not stay in step, the
H200 run's 960 calls never came near all-full-length at once): *typical*, the mean, and
*peak*, three standard deviations above it. The bound where every answer is at full length
at once is kept in the JSON (`usage_full_answers`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from sparkops.errors import UserError
from sparkops.plan.shapes import ModelShape, engine_layout

_SPREAD = 3.0  # standard deviations above the mean for the peak


@dataclass(frozen=True)
class SharedPrefixPlan:
    """How full the KV cache runs for `seqs` calls sharing `prefixes` openings."""

    seqs: int
    prompt_tokens: int
    shared_tokens: int  # whole shared blocks (at hit granularity), held once per prefix
    own_prompt_tokens: int  # per sequence: the shared tail plus the record's own text
    output_tokens: int
    prefixes: int
    block_size: int  # prefix-hit granularity: the groups' least common block size
    group_blocks: tuple[int, ...]  # block size in tokens of each KV-cache group
    kv_bytes_per_token: int
    pool_blocks: int
    block_bytes: int  # one block of every layer slot of a group
    shared_blocks: int  # all prefixes, as the running calls reference them
    own_blocks_typical: float  # per sequence, mean over its answer
    own_blocks_peak: int  # per sequence at full answer length
    shared_bytes: int
    seq_bytes_typical: int
    seq_bytes_peak: int
    kv_cache_bytes: int
    usage_typical: float
    usage_peak: float
    usage_full_answers: float  # every answer at full length at once: a bound, not a level
    seqs_that_fit_peak: int
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["group_blocks"] = list(self.group_blocks)
        out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class CallMix:
    """The calls in flight: `seqs` calls of `prompt_tokens`, of which `shared_fraction` is a
    shared opening (one of `prefixes` different openings), each writing `output_tokens`."""

    seqs: int
    prompt_tokens: int
    shared_fraction: float
    output_tokens: int
    prefixes: int = 1

    def check(self) -> None:
        """Refuse a mix no plan can describe, naming the flags that set it."""
        if self.seqs < 1 or self.prompt_tokens < 1 or self.output_tokens < 0 or self.prefixes < 1:
            raise UserError(
                "--seqs, --prompt-tokens-per-call and --prefixes must be at least 1, "
                "--gen-tokens-per-call 0 or more"
            )
        if not 0.0 <= self.shared_fraction <= 1.0:
            raise UserError(f"--shared {self.shared_fraction} is outside 0..100%")


def plan_shared_prefix(
    shape: ModelShape,
    calls: CallMix,
    *,
    width: int,
    kv_cache_bytes: int,
    block_size: int | None = None,
    kv_dtype: str = "fp8",
) -> SharedPrefixPlan:
    """Plan `calls` (see CallMix) against a `kv_cache_bytes` cache of `width`-byte entries.
    `block_size`: vLLM's --block-size (16 unless the profile sets one; vLLM-CPU uses 128)."""
    calls.check()
    if kv_cache_bytes <= 0:
        raise UserError("the KV cache size must be positive: pass --kv-cache-gib")
    seqs, prompt_tokens, output_tokens = calls.seqs, calls.prompt_tokens, calls.output_tokens
    shared_fraction, prefixes = calls.shared_fraction, calls.prefixes
    layout = engine_layout(
        shape,
        width=width,
        kv_cache_bytes=kv_cache_bytes,
        max_model_len=prompt_tokens + output_tokens,
        max_num_batched_tokens=8192,
        base_block=block_size or 16,
    )
    if layout.num_blocks < 1:
        raise UserError("the KV cache holds no block of this model: pass a larger --kv-cache-gib")
    groups = [(block, window) for _layers, block, window in layout.groups]
    hit = math.lcm(*(block for block, _ in groups))
    shared = int(prompt_tokens * shared_fraction) // hit * hit  # whole hit blocks only
    own = prompt_tokens - shared

    def held(length: int) -> tuple[int, int]:
        """(own blocks, shared blocks referenced) of one call holding `length` tokens."""
        mine = referenced = 0
        for block, window in groups:
            first = 0 if window is None else max(0, length - window + 1) // block
            shared_blocks = shared // block
            mine += -(-length // block) - max(first, shared_blocks)
            referenced += max(0, shared_blocks - first)
        return mine, referenced

    # every stage of the answer equally likely: written 0..output_tokens tokens
    stages = [held(prompt_tokens + w)[0] for w in range(output_tokens + 1)]
    mean = sum(stages) / len(stages)
    spread = math.sqrt(sum((s - mean) ** 2 for s in stages) / len(stages))
    full = stages[-1]
    shared_blocks = prefixes * held(prompt_tokens + output_tokens // 2)[1]
    pool = layout.num_blocks
    typical_blocks = shared_blocks + seqs * mean
    peak_blocks = typical_blocks + _SPREAD * spread * math.sqrt(seqs)
    per_block = layout.page_bytes * layout.groups[0][0]
    fit = _calls_that_fit(pool - shared_blocks, mean, spread) if mean else seqs
    usage_peak = peak_blocks / pool
    warnings = []
    if usage_peak > 1.0:
        warnings.append(
            f"{seqs:,} calls need about {peak_blocks:,.0f} of the cache's {pool:,} blocks at "
            "their high point: vLLM will preempt; lower the concurrency or give vLLM a bigger "
            "KV cache" + ("" if kv_dtype == "fp8" else ", or use an fp8 KV cache")
        )
    return SharedPrefixPlan(
        seqs=seqs,
        prompt_tokens=prompt_tokens,
        shared_tokens=shared,
        own_prompt_tokens=own,
        output_tokens=output_tokens,
        prefixes=prefixes,
        block_size=hit,
        group_blocks=tuple(block for block, _ in groups),
        kv_bytes_per_token=shape.bytes_per_token(width),
        pool_blocks=pool,
        block_bytes=per_block,
        shared_blocks=shared_blocks,
        own_blocks_typical=mean,
        own_blocks_peak=full,
        shared_bytes=shared_blocks * per_block,
        seq_bytes_typical=round(mean * per_block),
        seq_bytes_peak=full * per_block,
        kv_cache_bytes=kv_cache_bytes,
        usage_typical=typical_blocks / pool,
        usage_peak=usage_peak,
        usage_full_answers=(shared_blocks + seqs * full) / pool,
        seqs_that_fit_peak=int(fit),
        warnings=tuple(warnings),
    )


def _calls_that_fit(free_blocks: float, mean: float, spread: float) -> int:
    """The most calls whose peak (n x mean + 3 sd x sqrt(n)) stays within `free_blocks`."""
    if free_blocks <= 0:
        return 0
    root = (-_SPREAD * spread + math.sqrt((_SPREAD * spread) ** 2 + 4 * mean * free_blocks)) / (
        2 * mean
    )
    return int(root * root)
