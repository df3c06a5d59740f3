"""Per-step prefix-cache diagnosis: does a step lose hit rate to its prompts or to the cache?

Two different losses hide in one hit rate (the seed's 94% falling to 88%). The prompts set a
ceiling: whole blocks of the step's shared prefix over its prompt tokens; nothing can do
better. What the server achieved is reported per call in `usage.prompt_tokens_details.
cached_tokens`. Ceiling below 100% is prompt design; achieved below ceiling is cache
pressure (shared blocks evicted between uses). Pure: totals in, figures and sentences out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkops.jobdir.job_report import PrefixRecord, StepRow
from sparkops.jobdir.step_totals import StepTotals

# Points of hit rate below the ceiling that still count as "at the ceiling" (vLLM keeps the
# last prompt token out of the cache and counts whole blocks, so a small gap is not pressure);
# the bottleneck's rule uses the same figure.
from sparkops.metrics.bottleneck import PRESSURE_POINTS

# Points above the ceiling that are more than rounding: the cache held more than the prompts
# alone can share (a warm cache from an earlier run, or records that share text of their own).
ABOVE_POINTS = 0.05


def usage_possible(prompt: int, completion: int, cached: int | None) -> bool:
    """Whether one answer's `usage` figures can be true: no count below zero, and no more
    cached prompt tokens than prompt tokens. Figures that cannot be true (a proxy that
    rewrites `usage`, a server bug) are left out of every token figure and named: summed in,
    they made a hit rate of 6,243.8% (issue 37)."""
    if prompt < 0 or completion < 0:
        return False
    return cached is None or 0 <= cached <= prompt


def impossible_usage_sentence(answers: int) -> str:
    """The report's sentence for answers whose usage figures `usage_possible` refused."""
    return (
        f"{answers:,} answer(s) carried usage figures that cannot be true (cached > prompt, or "
        "negative); left out of the hit rate and the token figures (their `prompt_tokens`, "
        "`completion_tokens` and `cached_tokens` in results.jsonl say which)."
    )


def diagnose(totals: Mapping[str, StepTotals]) -> list[StepRow]:
    """One row per step, in pipeline order as given: figures plus a one-sentence verdict."""
    rows = []
    for step, t in totals.items():
        if not t.prompt_tokens:
            continue
        ceiling = _r(t.reusable_tokens / t.prompt_tokens) if t.ceiling_known else None
        achieved = _r(t.cached_tokens / t.prompt_tokens) if t.cached_known else None
        rows.append(
            StepRow(
                step=step,
                calls=t.calls,
                prompt_tokens=t.prompt_tokens,
                cached_tokens=t.cached_tokens if t.cached_known else None,
                hit_rate=achieved,
                ceiling=ceiling,
                verdict=verdict(step, achieved, ceiling),
            )
        )
    return rows


def verdict(step: str, achieved: float | None, ceiling: float | None) -> str:
    """Tell the user which loss dominates for this step, and what to change."""
    if achieved is None:
        return (
            f"{step}: hit rate per step unavailable: the server did not report cached tokens; "
            "start vLLM with --enable-prompt-tokens-details (the kit's profiles set it)."
        )
    if ceiling is None:
        return (
            f"{step}: {achieved:.1%} of prompt tokens came from the cache; the ceiling is "
            "unknown (the server's /tokenize was not reachable at the start of the job)."
        )
    gap = (ceiling - achieved) * 100
    design = (1 - ceiling) * 100
    if -gap > PRESSURE_POINTS:
        return f"{step}: " + above_ceiling(achieved, ceiling)
    if gap <= PRESSURE_POINTS:
        where = (
            f"at its ceiling and {-gap:.1f} points over it ({achieved:.1%} against "
            f"{ceiling:.1%}: {_OVER_REASON})"
            if -gap > ABOVE_POINTS
            else f"at its ceiling ({achieved:.1%} of {ceiling:.1%})"
        )
        return (
            f"{step}: {where}; the {design:.1f} points below 100% are prompt design: more "
            "shared text before the record would raise it."
        )
    side = "cache pressure" if gap >= design else "prompt design, then cache pressure"
    return (
        f"{step}: {gap:.1f} points below its {ceiling:.1%} ceiling lost to cache pressure "
        f"(shared blocks evicted between uses) and {design:.1f} to prompt design; mostly "
        f"{side}: try --schedule step-aware, lower --concurrency or give the KV cache more "
        "memory."
    )


_OVER_REASON = "these records share some text beyond the template, or the cache already held some"


def above_ceiling(achieved: float, ceiling: float) -> str:
    """Why a hit rate can beat the prompts' ceiling, and what that means for the diagnosis.

    The ceiling counts only the template text every record shares; a cache that already held
    these prompts (an earlier run of the same records, another job on the server) or records
    that share text among themselves lift the hit rate above it. Saying "at its ceiling
    (99.0% of 96.2%)" would hide that; within PRESSURE_POINTS of the ceiling the step still
    counts as at it, with the excess named, and further above the split between prompt
    design and cache pressure cannot be measured on this run.
    """
    over = (achieved - ceiling) * 100
    text = (
        f"{achieved:.1%} of prompt tokens came from the cache, {over:.1f} points above the "
        f"{ceiling:.1%} that the shared prompt text allows: "
    )
    if over <= PRESSURE_POINTS:
        return text + _OVER_REASON + "."
    return text + (
        "the cache already held text of these records (a warm cache from an earlier run or "
        "other traffic) or records share text of their own, so this run cannot tell prompt "
        "design from cache pressure; run on a freshly started server to measure it."
    )


def overall(rows: Sequence[StepRow]) -> str | None:
    """One sentence for the whole job, weighting steps by prompt tokens."""
    usable = [
        (r, r.hit_rate, r.ceiling) for r in rows if r.hit_rate is not None and r.ceiling is not None
    ]
    if not usable:
        return None
    prompt = sum(r.prompt_tokens for r, _, _ in usable)
    if not prompt:
        return None
    achieved = sum(hit * r.prompt_tokens for r, hit, _ in usable) / prompt
    ceiling = sum(ceil * r.prompt_tokens for r, _, ceil in usable) / prompt
    pressure = max(0.0, (ceiling - achieved) * 100)
    design = (1 - ceiling) * 100
    worst, _, _ = max(usable, key=lambda x: (x[2] - x[1]) * x[0].prompt_tokens)
    if (achieved - ceiling) * 100 > PRESSURE_POINTS:
        return "Over the whole job: " + above_ceiling(achieved, ceiling)
    if pressure <= PRESSURE_POINTS:
        return (
            f"You lose {design:.1f} points of hit rate to prompt design and {pressure:.1f} to "
            "cache pressure: the cache keeps up; to gain, share more text across records."
        )
    return (
        f"You lose {pressure:.1f} points of hit rate to cache pressure (most in step "
        f"{worst.step}) and {design:.1f} to prompt design: try --schedule step-aware, a lower "
        "--concurrency, or more KV cache memory."
    )


def short_prefix_note(prefix: PrefixRecord) -> str | None:
    """Name the block size as the cause where a step's shared prefix is shorter than one block:
    vLLM caches whole blocks only, so such a step reuses nothing, which "prompt design" alone
    does not explain (the sample's 40-78-token openings against vLLM-CPU's 128-token block)."""
    block = prefix.block_size
    if block is None or block < 1:
        return None
    short = {
        name: p.shared_tokens for name, p in (prefix.steps or {}).items() if p.shared_tokens < block
    }
    if not short:
        return None
    which = ", ".join(f"{name} {tokens}" for name, tokens in short.items())
    return (
        f"Shared prefixes shorter than one {block}-token block ({which} tokens): vLLM caches "
        f"whole blocks only, so these steps reuse nothing; put at least {block} tokens of "
        "shared instructions before the record."
    )


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
