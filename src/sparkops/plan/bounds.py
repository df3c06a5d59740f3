"""What a planner may be given: figures no machine can have are refused before anything is
computed, each with the slip that most likely produced it (issue 37 item 13).

A planner is arithmetic: given a 200 GiB KV cache on a 128 GB Spark, 273,000 GB/s (MB/s typed)
or a Windows share larger than the laptop, it printed a confident plan (23.5% KV use, 1.4M
tok/s, "use quantised weights"). The bounds here are the machines the kit plans for:

- memory: a GB10 (DGX Spark, RTX Spark) has 128 GB, an H200 141 GB; no one host the kit plans
  for has more than `LARGEST_HOST_GB` (a CPU server's RAM included);
- bandwidth: a GB10's LPDDR5x gives 273 GB/s, an H200's HBM3e 4,800; nothing real is above
  `LARGEST_BANDWIDTH_GB_S`;
- rates (hit rate, shared share): a value with `%` is a percent, a bare value up to 1 a
  fraction and above 1 a percent; a percent under 1 (`0.887%`) is refused, as it is almost
  always a fraction with a `%` typed after it: a real rate under 1% is written as a fraction
  (`0.00887`), which is accepted.

Each check raises UserError naming the flag, the value, why it cannot be, and the fix.
"""

from __future__ import annotations

import math

from sparkops.errors import UserError

# Memory of the machines the planners know by name, decimal GB (vendor figures).
MACHINE_MEMORY_GB = {"gb10": 128.0, "h200": 141.0}
MACHINE_NAMES = {"gb10": "a GB10", "h200": "an H200"}
# No one host the kit plans for has more memory (a CPU server's RAM included), decimal GB.
LARGEST_HOST_GB = 4096.0
# No real machine's memory is faster (H200 4,800 GB/s, B200 8,000), decimal GB/s.
LARGEST_BANDWIDTH_GB_S = 10_000.0


def rate(flag: str, text: str, what: str) -> float:
    """`text` as a fraction 0..1: 0.887, 88.7 and 88.7% all mean 88.7% (see the module doc:
    a bare value above 1 is a percent; a percent under 1 is refused with the fraction)."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw.removesuffix("%").strip())
    except ValueError:
        raise UserError(f"{flag} {text!r} is not a {what}: write 0.887, 88.7 or 88.7%") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{flag} {text!r} is not a {what}: give 0..100%, e.g. 0.887 or 88.7%")
    if percent and 0 < value < 1:
        raise UserError(
            f"{flag} {text} is a {what} of {value / 100:.4g}: did you mean {value * 100:g}%? "
            f"A % sign makes the number a percent; write {value * 100:g}% (or {value:g}), or "
            f"{value / 100:.4g} if it really is under 1%"
        )
    if percent or value > 1.0:
        value /= 100.0
    if value > 1.0:
        raise UserError(f"{flag} {text} is above 100%: give a {what} of 0..100%, e.g. 88.7%")
    return value


def at_least(flag: str, value: float | None, low: float, unit: str) -> None:
    """Refuse a count or size below `low`, or not a finite number (None: not given)."""
    if value is None:
        return
    if not math.isfinite(value):
        raise UserError(f"{flag} {value:g} is not a number: give {low:g} {unit} or more")
    if value < low:
        raise UserError(f"{flag} {value:g} is below {low:g}: give {low:g} {unit} or more")


def positive(flag: str, value: float | None, fix: str) -> None:
    """Refuse a rate or size that is not a finite number above 0 (None: not given)."""
    if value is not None and not 0 < value < math.inf:
        raise UserError(f"{flag} {value:g} is not a number above 0: {fix}")


def bandwidth(value: float) -> float:
    """A memory bandwidth in GB/s that a real machine can have."""
    if not 0 < value <= LARGEST_BANDWIDTH_GB_S:
        slip = (
            f": did you give MB/s? {value:,.0f} MB/s is {value / 1000:,.4g} GB/s"
            if LARGEST_BANDWIDTH_GB_S < value <= LARGEST_BANDWIDTH_GB_S * 1000
            else ""
        )
        raise UserError(
            f"--bandwidth-gb-s {value:,.6g} is not a memory bandwidth any machine has{slip}. "
            f"Give GB/s, above 0 and at most {LARGEST_BANDWIDTH_GB_S:,.0f} (a GB10 273, an "
            "H200 4,800), or leave it out and name the machine with --machine"
        )
    return value


def machine_gb(flag: str, value: float | None, most_gb: float, machine: str) -> None:
    """Refuse a memory figure in GB that is not above 0 or more than `machine` has
    (`most_gb`); the fix names MB when the figure read as MB would fit (None: not given)."""
    if value is None:
        return
    if not value > 0:
        raise UserError(f"{flag} {value:g} is not a memory size: give GB above 0")
    if value > most_gb:
        slip = (
            f"; did you give MB? {value:,.6g} MB is {value / 1000:,.4g} GB"
            if 1000 <= value <= most_gb * 1000
            else ""
        )
        raise UserError(
            f"{flag} {value:,.6g} GB is more than {machine} has ({most_gb:,.6g} GB){slip}: "
            f"give decimal GB, at most {most_gb:,.6g}"
        )


def kv_cache_fits(kv_bytes: int, weights_gb: float, memory_gb: float, source: str) -> None:
    """A KV cache that does not fit in the memory vLLM gets (beside the weights, when they fit
    one machine) is refused with the largest that does: the planner would otherwise report
    its share of a cache the machine cannot hold. Weights larger than that memory are split
    over machines (pipeline parallel, each holding part of them beside its own cache), so
    there the cache alone is checked."""
    kv_gb = kv_bytes / 1e9
    beside = weights_gb if weights_gb < memory_gb else 0.0
    if kv_gb + beside <= memory_gb:
        return
    room_gib = (memory_gb - beside) * 1e9 / (1 << 30)
    weights = f" and the weights ({beside:,.1f} GB) are" if beside else " is"
    raise UserError(
        f"{source} ({kv_bytes / (1 << 30):,.4g} GiB = {kv_gb:,.1f} GB){weights} more than "
        f"the {memory_gb:,.1f} GB vLLM gets (--memory-gb; default 0.88 x 128 GB of a GB10): "
        f"give --kv-cache-gib {math.floor(room_gib * 10) / 10:g} or less, or --memory-gb of a "
        "machine that has more"
    )
