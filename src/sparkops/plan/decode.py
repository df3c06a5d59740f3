"""The decode ceiling: generated tokens/s against concurrency when memory bandwidth binds.

Each decode step reads the weights once for the whole batch, and every running sequence's own
KV cache (shared prefix blocks too: attention reads them per sequence). With `B` sequences of
context `L`:

    step_s   = (weight_bytes + B x kv_read_bytes(L)) / bandwidth
    tok_s(B) = B / step_s                -> bandwidth / kv_read_bytes(L) as B grows

so past `B = weight_bytes / kv_read_bytes(L)` (the knee, half the asymptote) more concurrency
buys ever less decode speed, and only buys hit rate (more shared prefixes held). That is the
seed's flat ~1,300 computed tok/s from 240 to 960 in flight on a GB10 (~273 GB/s).

Assumed: decode is memory-bound (compute, prefill and the scheduler's own time are left out),
the whole bandwidth is achieved (real kernels reach perhaps 60-85% of it, so measured points
sit below the curve), sliding-window layers read at most their window, and `L` is the mean
context of a call in flight (its prompt plus half its answer).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from sparkops.errors import UserError
from sparkops.plan.shapes import ModelShape

# Memory bandwidth by machine, decimal GB/s (vendor figures).
BANDWIDTH_GB_S = {
    "gb10": 273.0,  # DGX Spark / RTX Spark: LPDDR5x, ~273 GB/s (NVIDIA's spec sheet)
    "h200": 4800.0,  # H200 SXM: HBM3e, 4.8 TB/s
}
DEFAULT_LEVELS = (1, 8, 32, 64, 128, 240, 480, 960)
NEAR_ASYMPTOTE = 0.9  # "stops buying speed": within 10% of the asymptote


@dataclass(frozen=True)
class DecodePoint:
    concurrency: int
    step_ms: float
    tok_s: float
    share_of_asymptote: float


@dataclass(frozen=True)
class DecodeCeiling:
    """Decode tokens/s against concurrency, the asymptote and the knee."""

    bandwidth_gb_s: float
    weight_bytes: int
    context: int
    kv_read_bytes_per_seq: int
    asymptote_tok_s: float
    knee_concurrency: float  # half the asymptote
    near_asymptote_concurrency: float  # 90% of the asymptote
    points: tuple[DecodePoint, ...]

    def tok_s(self, concurrency: float) -> float:
        step = (self.weight_bytes + concurrency * self.kv_read_bytes_per_seq) / (
            self.bandwidth_gb_s * 1e9
        )
        return concurrency / step

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["points"] = [asdict(p) for p in self.points]
        return out


def decode_ceiling(
    shape: ModelShape,
    *,
    width: int,
    context: int,
    bandwidth_gb_s: float,
    weights_gb: float | None = None,
    levels: tuple[int, ...] = DEFAULT_LEVELS,
) -> DecodeCeiling:
    """The ceiling for `shape` with KV elements of `width` bytes at mean context `context`."""
    weights = weights_gb if weights_gb is not None else shape.weights_gb
    if weights is None or weights < 0:
        raise UserError("the weights' size is unknown: pass --weights-gb")
    if bandwidth_gb_s <= 0 or context < 1:
        raise UserError("--bandwidth-gb-s must be positive and --context at least 1")
    kv = shape.sequence_bytes(context, width)
    weight_bytes = int(weights * 1e9)
    asymptote = bandwidth_gb_s * 1e9 / kv
    knee = weight_bytes / kv
    ceiling = DecodeCeiling(
        bandwidth_gb_s=bandwidth_gb_s,
        weight_bytes=weight_bytes,
        context=context,
        kv_read_bytes_per_seq=kv,
        asymptote_tok_s=asymptote,
        knee_concurrency=knee,
        # tok_s(B) / asymptote = B / (knee + B) = 0.9  ->  B = 9 x knee
        near_asymptote_concurrency=NEAR_ASYMPTOTE / (1 - NEAR_ASYMPTOTE) * knee,
        points=(),
    )
    points = tuple(
        DecodePoint(
            concurrency=b,
            step_ms=b / ceiling.tok_s(b) * 1000.0,
            tok_s=ceiling.tok_s(b),
            share_of_asymptote=ceiling.tok_s(b) / asymptote,
        )
        for b in levels
    )
    return replace(ceiling, points=points)


def parse_levels(text: str) -> list[int]:
    """`1,240,480,960` -> [1, 240, 480, 960]; refuses zero, negatives and repeats (the
    concurrency levels of `plan decode` and `bench sweep`, kept in plan: bench imports it)."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(
            f"--levels {text!r} is not a list of integers: use e.g. 1,240,480"
        ) from None
    if not levels or min(levels) < 1 or len(set(levels)) != len(levels):
        raise UserError(f"--levels {text!r}: give distinct concurrencies of at least 1")
    return levels
