"""PNG plots of a sweep: records/min and prefix-cache hit rate against concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a display

import matplotlib.pyplot as plt

from sparkops.bench.sweep import LevelSummary
from sparkops.files import write_figure

RECORDS_PLOT = "records_per_min.png"
HIT_RATE_PLOT = "hit_rate.png"


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


def write_plots(levels: Sequence[LevelSummary], out: Path) -> list[Path]:
    """Write both plots into `out`; returns their paths."""
    records = out / RECORDS_PLOT
    hits = out / HIT_RATE_PLOT
    _plot(levels, [lv.records_per_min for lv in levels], "records/min (middle of run)", records)
    _plot(
        levels,
        [None if lv.hit_rate is None else 100.0 * lv.hit_rate for lv in levels],
        "prefix cache hit rate (%)",
        hits,
    )
    return [records, hits]
