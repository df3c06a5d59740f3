"""PNG plots of a sweep: records/min, prefix-cache hit rate, and the measured token rates
beside the decode ceiling (plan/decode.py) when the sweep knows the model's shape."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt

from sparkops.bench.sweep import LevelSummary
from sparkops.files import write_figure
from sparkops.plan.decode import DecodeCeiling

RECORDS_PLOT = "records_per_min.png"
HIT_RATE_PLOT = "hit_rate.png"
DECODE_PLOT = "decode_ceiling.png"


def _plot(
    levels: Sequence[LevelSummary], values: list[float | None], ylabel: str, path: Path
) -> None:
    points = [(lv.concurrency, v) for lv, v in zip(levels, values, strict=True) if v is not None]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    try:
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o")
            if len(xs) > 1 and max(xs) / max(min(xs), 1) >= 10:
                ax.set_xscale("log")
            ax.set_xticks(list(xs), [str(x) for x in xs])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("requests in flight (concurrency)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        write_figure(path, fig)
    finally:
        plt.close(fig)


def _decode_plot(levels: Sequence[LevelSummary], ceiling: DecodeCeiling, path: Path) -> None:
    """Measured generation and computed tok/s per level beside the decode ceiling's curve."""
    top = max([lv.concurrency for lv in levels] + [p.concurrency for p in ceiling.points])
    xs = [1 + (top - 1) * k / 200 for k in range(201)]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    try:
        ax.plot(xs, [ceiling.tok_s(x) for x in xs], label="decode ceiling (bandwidth)")
        ax.axhline(ceiling.asymptote_tok_s, linestyle=":", color="grey", label="asymptote")
        for name, label in (
            ("generation_tok_s", "measured generation tok/s"),
            ("computed_tok_s", "measured computed tok/s"),
        ):
            points = [(lv.concurrency, getattr(lv, name)) for lv in levels]
            shown = [(x, y) for x, y in points if y is not None]
            if shown:
                ax.plot(*zip(*shown, strict=True), marker="o", linestyle="none", label=label)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("requests in flight (concurrency)")
        ax.set_ylabel("tokens/s")
        ax.set_title(
            f"{ceiling.bandwidth_gb_s:,.0f} GB/s, context {ceiling.context:,}: 90% of the "
            f"asymptote at {ceiling.near_asymptote_concurrency:,.0f}",
            fontsize=9,
        )
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        write_figure(path, fig)
    finally:
        plt.close(fig)


def write_plots(
    levels: Sequence[LevelSummary], out: Path, ceiling: DecodeCeiling | None = None
) -> list[Path]:
    """Write the plots into `out` (the decode plot only with a ceiling); returns their paths."""
    records = out / RECORDS_PLOT
    hits = out / HIT_RATE_PLOT
    _plot(levels, [lv.records_per_min for lv in levels], "records/min (middle of run)", records)
    _plot(
        levels,
        [None if lv.hit_rate is None else 100.0 * lv.hit_rate for lv in levels],
        "prefix cache hit rate (%)",
        hits,
    )
    paths = [records, hits]
    if ceiling is not None:
        _decode_plot(levels, ceiling, out / DECODE_PLOT)
        paths.append(out / DECODE_PLOT)
    return paths
