"""The HTML report's own plots (report/html.py), drawn with matplotlib and inlined as PNG:
the load over time (the client's calls in flight, each endpoint's running and waiting requests
and KV cache use, from timeline.jsonl) and each step's hit rate over time against its ceiling
(from the answers' cached tokens). The throughput plot is report/render.py's, as report.md's.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sparkops.files import figure_png
from sparkops.jobdir import lines
from sparkops.metrics.timeline import TimelineSample


def step_hit_series(
    timings: Iterable[lines.Timing], buckets: int = 40
) -> dict[str, list[tuple[float, float]]]:
    """Per step, (seconds since the first answer, cached/prompt tokens) per time bucket, over
    the answers that reported their cached tokens (figures that cannot be true left out)."""
    points = [
        (t.t, s.step, s.prompt_tokens, s.cached_tokens)
        for t in timings
        if t.t is not None
        for s in t.steps
        if s.cached_tokens is not None
        and 0 <= s.cached_tokens <= s.prompt_tokens
        and s.prompt_tokens > 0
    ]
    if not points:
        return {}
    origin = min(p[0] for p in points)
    width = max(1.0, (max(p[0] for p in points) - origin) / buckets)
    sums: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for t, step, prompt, cached in points:
        cell = sums[step][int((t - origin) // width)]
        cell[0] += cached
        cell[1] += prompt
    return {
        step: [((k + 0.5) * width, c / p) for k, (c, p) in sorted(cells.items())]
        for step, cells in sums.items()
    }


# ---- plots (matplotlib, PNG inline) -----------------------------------------------------------
def load_figure(samples: Sequence[TimelineSample]) -> Any:
    """The client's calls in flight, each endpoint's running and waiting requests, and its KV
    cache use, over time."""
    import matplotlib.pyplot as plt

    origin = min(s.t for s in samples)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    client = sorted({(s.t, s.in_flight) for s in samples if s.in_flight is not None})
    if client:
        top.plot(
            [t - origin for t, _ in client], [n for _, n in client], label="client: calls in flight"
        )
    for endpoint, series in _by_endpoint(samples).items():
        for key, style in (("running", "-"), ("waiting", ":")):
            shown = [(s.t - origin, s.v[key]) for s in series if key in s.v]
            if shown:
                top.plot(*zip(*shown, strict=True), style, label=f"{endpoint}: {key}")
        kv = [
            (s.t - origin, 100 * s.v["kv_cache_usage"]) for s in series if "kv_cache_usage" in s.v
        ]
        if kv:
            bottom.plot(*zip(*kv, strict=True), label=f"{endpoint}: KV cache use")
    top.set_ylabel("requests")
    top.set_ylim(bottom=0)
    top.legend(fontsize="small")
    top.set_title("Calls in flight, running and waiting requests")
    bottom.set_ylabel("KV cache use (%)")
    bottom.set_ylim(0, 100)
    bottom.set_xlabel("seconds since the first sample")
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(fontsize="small")
    fig.tight_layout()
    return fig


def step_figure(
    series: dict[str, list[tuple[float, float]]], ceilings: dict[str, float | None]
) -> Any:
    """Each step's hit rate over time (solid) against its ceiling (dashed, same colour)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for step, points in series.items():
        (line,) = ax.plot(
            *zip(*[(t, 100 * h) for t, h in points], strict=True),
            marker=".",
            label=f"{step}: hit rate",
        )
        if (ceiling := ceilings.get(step)) is not None:
            ax.axhline(
                100 * ceiling, linestyle="--", color=line.get_color(), label=f"{step}: ceiling"
            )
    ax.set_ylim(0, 100)
    ax.set_ylabel("prefix cache hit rate (%)")
    ax.set_xlabel("seconds since the first answer")
    ax.set_title("Hit rate per step against its ceiling")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _by_endpoint(samples: Sequence[TimelineSample]) -> dict[str, list[TimelineSample]]:
    out: dict[str, list[TimelineSample]] = defaultdict(list)
    for s in samples:
        if s.v:
            out[s.endpoint].append(s)
    return out


def png(fig: Any) -> str:
    """A figure as base64 PNG (closed afterwards)."""
    import matplotlib.pyplot as plt

    try:
        data = figure_png(fig, dpi=100)
    finally:
        plt.close(fig)
    return base64.b64encode(data).decode("ascii")
