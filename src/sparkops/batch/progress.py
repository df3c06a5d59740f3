"""Live progress (rich): done/total, records/min, hit rate, in flight, errors, ETA.

Counts and rates only; no record text, no ids, ever reaches the terminal.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sparkops.batch.engine import Stats


class ProgressView:
    def __init__(self, stats: Stats, total: int, already: int, enabled: bool = True) -> None:
        self.stats = stats
        self.already = already
        self._t0 = time.monotonic()
        self._progress = Progress(
            TextColumn("[bold]batch"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
            TextColumn("{task.fields[rpm]} rec/min"),
            TextColumn("hit {task.fields[hit]}"),
            TextColumn("in flight {task.fields[inflight]}"),
            TextColumn("errors {task.fields[errors]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not enabled,
            refresh_per_second=2,
        )
        self._task = self._progress.add_task(
            "batch", total=total, completed=already, rpm="-", hit="-", inflight=0, errors=0
        )

    def __enter__(self) -> ProgressView:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.update()
        self._progress.stop()

    def update(self) -> None:
        s = self.stats
        finished = s.done + s.errors
        elapsed = time.monotonic() - self._t0
        rpm = f"{finished / elapsed * 60:,.0f}" if elapsed > 1 and finished else "-"
        hit = f"{s.hit_rate:.1%}" if s.hit_rate is not None else "-"
        self._progress.update(
            self._task,
            completed=self.already + s.skipped + finished,
            rpm=rpm,
            hit=hit,
            inflight=s.in_flight,
            errors=s.errors,
        )
