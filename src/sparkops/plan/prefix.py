"""KV cache use when every call shares its opening: shared blocks once, the rest per sequence.

With prefix caching, the calls in flight that share a step's instructions point at the same
cached blocks; only what follows the last whole shared block is each sequence's own: the
shared text's tail up to the block edge (recomputed every call, as the seed notes), the
record's own prompt text and the answer being written. Charging every sequence its whole
context (plan.memory's `--context` view) reads the seed's own setting (1,000 in flight,
~1,600-token calls ~90% shared, ~125 out) as 279-677% of the cache where the seed measured
about 55% and no preemption.

Per sequence, blocks are whole (`block_size` tokens); sliding-window layers hold at most their
window of each sequence and of the shared prefix. Two figures: *typical*, with answers half
written (calls in flight are spread over their decode, as in a steady run), and *peak*, every
answer at full length at once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from sparkops.errors import UserError
from sparkops.plan.shapes import ModelShape

KV_USAGE_WARN_FRACTION = 0.70  # the seed: above ~70% full the hit rate lost 1-2 points


@dataclass(frozen=True)
class SharedPrefixPlan:
    """How full the KV cache runs for `seqs` calls sharing `prefixes` openings."""

    seqs: int
    prompt_tokens: int
    shared_tokens: int  # whole shared blocks, held once per prefix
    own_prompt_tokens: int  # per sequence: the shared tail plus the record's own text
    output_tokens: int
    prefixes: int
    block_size: int
    kv_bytes_per_token: int
    shared_bytes: int
    seq_bytes_typical: int
    seq_bytes_peak: int
    kv_cache_bytes: int
    usage_typical: float
    usage_peak: float
    seqs_that_fit_peak: int
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out


def _blocks(tokens: int, block: int) -> int:
    return math.ceil(tokens / block) * block if tokens > 0 else 0


def plan_shared_prefix(
    shape: ModelShape,
    *,
    width: int,
    kv_cache_bytes: int,
    seqs: int,
    prompt_tokens: int,
    shared_fraction: float,
    output_tokens: int,
    prefixes: int = 1,
    block_size: int | None = None,
    kv_dtype: str = "fp8",
) -> SharedPrefixPlan:
    """Plan `seqs` calls of `prompt_tokens` (of which `shared_fraction` is a shared opening,
    among `prefixes` different openings) writing `output_tokens` each."""
    if seqs < 1 or prompt_tokens < 1 or output_tokens < 0 or prefixes < 1:
        raise UserError(
            "--seqs, --prompt-tokens-per-call and --prefixes must be at least 1, "
            "--gen-tokens-per-call 0 or more"
        )
    if not 0.0 <= shared_fraction <= 1.0:
        raise UserError(f"--shared {shared_fraction} is outside 0..100%")
    if kv_cache_bytes <= 0:
        raise UserError("the KV cache size must be positive: pass --kv-cache-gib")
    block = block_size or shape.block_size
    shared = int(prompt_tokens * shared_fraction) // block * block  # whole blocks only
    own = prompt_tokens - shared

    def seq_bytes(out: int) -> int:
        tokens = _blocks(own + out, block)
        return shape.sequence_bytes(tokens, width)

    typical, peak = seq_bytes(output_tokens // 2), seq_bytes(output_tokens)
    shared_bytes = prefixes * shape.sequence_bytes(shared, width)
    usage_typical = (shared_bytes + seqs * typical) / kv_cache_bytes
    usage_peak = (shared_bytes + seqs * peak) / kv_cache_bytes
    fit = max(0, kv_cache_bytes - shared_bytes) // peak if peak else seqs
    warnings = []
    if fit < seqs:
        warnings.append(
            f"at full answer length only {fit:,} of {seqs:,} sequences fit: vLLM will preempt; "
            "lower the concurrency or give vLLM a bigger KV cache"
            + ("" if kv_dtype == "fp8" else ", or use an fp8 KV cache")
        )
    elif usage_typical > KV_USAGE_WARN_FRACTION:
        warnings.append(
            f"the cache runs about {usage_typical:.0%} full: above ~70% the prefix cache evicts "
            "shared blocks and the hit rate drops; plan fewer in flight or a bigger cache"
        )
    return SharedPrefixPlan(
        seqs=seqs,
        prompt_tokens=prompt_tokens,
        shared_tokens=shared,
        own_prompt_tokens=own,
        output_tokens=output_tokens,
        prefixes=prefixes,
        block_size=block,
        kv_bytes_per_token=shape.bytes_per_token(width),
        shared_bytes=shared_bytes,
        seq_bytes_typical=typical,
        seq_bytes_peak=peak,
        kv_cache_bytes=kv_cache_bytes,
        usage_typical=usage_typical,
        usage_peak=usage_peak,
        seqs_that_fit_peak=int(fit),
        warnings=tuple(warnings),
    )
