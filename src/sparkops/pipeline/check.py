"""Prefix-reuse lint for a pipeline: how much of each step's prompt the cache can reuse.

Pure but for `probe_steps`, the one prefix probe (`sparkops pipeline check` and a batch
job's preflight both call it): it tokenizes through the server's /tokenize, so the real chat
template and tokenizer are used, and passes the token lists to `analyse_step`. Reuse stops
at the first token that differs, and vLLM reuses whole blocks only, so per step we report the
shared prefix, the whole-block part of it, and the tail recomputed on every call.

`structure()` needs no server: it reads only the validated pipeline (characters, not tokens),
so a pipeline can be checked on a controller before any server is up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkops.openai_http import ServerClient
from sparkops.pipeline.prompt import build_messages
from sparkops.pipeline.spec import StepSpec

# Two probe records that differ from their first character, so the shared prefix of their
# token lists is exactly the fixed text before the first record field.
PROBE_A = "Alpha probe record 1"
PROBE_B = "Zulu sample entry 22"


def probe_records(step: StepSpec) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Two differing records, and one with every field empty (fixed text only)."""
    return (
        dict.fromkeys(step.fields, PROBE_A),
        dict.fromkeys(step.fields, PROBE_B),
        dict.fromkeys(step.fields, ""),
    )


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class StepPrefix:
    step: str
    shared_tokens: int
    fixed_tokens: int
    block_size: int
    literal_after_record_chars: int

    @property
    def reusable_tokens(self) -> int:
        """Whole blocks of the shared prefix: what the prefix cache can hit."""
        return self.shared_tokens // self.block_size * self.block_size

    @property
    def tail_tokens(self) -> int:
        """Shared tokens past the last block edge, recomputed on every call."""
        return self.shared_tokens - self.reusable_tokens

    @property
    def after_record_tokens(self) -> int:
        """Fixed tokens placed after the first record field: never reusable."""
        return max(0, self.fixed_tokens - self.shared_tokens)

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.after_record_tokens > max(16, self.fixed_tokens // 10):
            out.append(
                f"step {self.step}: {self.after_record_tokens} of {self.fixed_tokens} fixed tokens "
                "come after a record field and are recomputed on every call; put the record last"
            )
        if self.shared_tokens < self.block_size:
            out.append(
                f"step {self.step}: shared prefix ({self.shared_tokens} tokens) is shorter than "
                f"one block ({self.block_size}); nothing can be reused"
            )
        return out


# Fixed characters after the first record field worth a warning without a tokenizer: about
# 16 tokens at ~4 characters a token, the token check's floor.
AFTER_RECORD_WARN_CHARS = 64


@dataclass(frozen=True)
class StepText:
    """One step's fixed text as characters: what a server-less check can say."""

    step: str
    fields: tuple[str, ...]
    shared_chars: int  # the system prompt plus the user template before its first field
    after_record_chars: int  # fixed user-template text after the first field

    @property
    def warnings(self) -> list[str]:
        if self.after_record_chars > max(AFTER_RECORD_WARN_CHARS, self.shared_chars // 10):
            return [
                f"step {self.step}: {self.after_record_chars} characters of fixed text come "
                "after a record field and are recomputed on every call; put the record last"
            ]
        return []


def structure(steps: Sequence[StepSpec]) -> list[StepText]:
    """Each step's fixed text before and after its first record field (no server needed)."""
    out = []
    for step in steps:
        before = step.user.format_map(dict.fromkeys(step.fields, "\0")).split("\0", 1)[0]
        out.append(
            StepText(
                step=step.name,
                fields=tuple(step.fields),
                shared_chars=len(step.system) + len(before),
                after_record_chars=literal_after_first_field(step.user),
            )
        )
    return out


def literal_after_first_field(template: str) -> int:
    """Characters of fixed text in `template` after its first placeholder."""
    import string

    seen = False
    chars = 0
    for literal, field, _, _ in string.Formatter().parse(template):
        if seen:
            chars += len(literal)
        if field is not None:
            seen = True
    return chars


def analyse_step(
    step: StepSpec,
    tokens_a: Sequence[int],
    tokens_b: Sequence[int],
    tokens_fixed: Sequence[int],
    block_size: int,
) -> StepPrefix:
    return StepPrefix(
        step=step.name,
        shared_tokens=common_prefix(tokens_a, tokens_b),
        fixed_tokens=len(tokens_fixed),
        block_size=block_size,
        literal_after_record_chars=literal_after_first_field(step.user),
    )


async def probe_steps(
    client: ServerClient, base: str, model: str, steps: Sequence[StepSpec], block_size: int
) -> list[StepPrefix]:
    """Each step's shared prefix, measured on the server at `base`: its three probe records
    (`probe_records`) tokenized with the server's own template, then `analyse_step`.
    Raises what `ServerClient.tokenize` raises (the callers decide: refuse, or warn)."""
    out = []
    for step in steps:
        toks = [
            await client.tokenize(base, model, build_messages(step, r)) for r in probe_records(step)
        ]
        out.append(analyse_step(step, toks[0], toks[1], toks[2], block_size=block_size))
    return out


def ceiling(calls: Sequence[tuple[int, int]]) -> float | None:
    """Best hit rate the prompts allow: Σ whole shared blocks / Σ prompt tokens.

    `calls` is (reusable_tokens_of_its_step, prompt_tokens) per call.
    """
    reusable = sum(min(r, p) for r, p in calls)
    prompt = sum(p for _, p in calls)
    return reusable / prompt if prompt else None
