"""Live progress (rich): done/total, records/min, hit rate, in flight, errors, ETA, and
which endpoints are stalled (out of rotation, see batch/stall.py).

Counts, rates and endpoint URLs only; no record text, no ids, ever reaches the terminal.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.engine import Stats
from sparkops.batch.stall import Change
from sparkops.privacy import redact


class ProgressView:
    def __init__(
        self,
        stats: Stats,
        total: int,
        already: int,
        enabled: bool = True,
        pool: EndpointPool | None = None,
    ) -> None:
        self.stats = stats
        self.already = already
        self.pool = pool
        self.console = Console(stderr=True)
        self._t0 = time.monotonic()
        self.drift = ""  # set once an endpoint changed what it serves (say())
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
            TextColumn("{task.fields[stalled]}", style="bold red"),
            console=self.console,
            disable=not enabled,
            refresh_per_second=2,
        )
        self._task = self._progress.add_task(
            "batch",
            total=total,
            completed=already,
            rpm="-",
            hit="-",
            inflight=0,
            errors=0,
            stalled="",
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
            completed=self.already + finished,  # skipped records are among `already`
            rpm=rpm,
            hit=hit,
            inflight=s.in_flight,
            errors=s.errors,
            stalled=" ".join(
                t
                for t in (stalled_text(self.pool.stalled_names()) if self.pool else "", self.drift)
                if t
            ),
        )

    def say(self, text: str) -> None:
        """One line above the bar (or, with the bar off, a warning on stderr): for events a
        user must see even without the live display, such as a change of what serves the job.
        """
        text = redact(text)  # it may name an endpoint
        if self._progress.disable:
            self.console.print(
                f"sparkops: warning: {text}", soft_wrap=True, highlight=False, markup=False
            )
        else:
            self._progress.console.print(text, soft_wrap=True, highlight=False, markup=False)
        self.drift = "serving changed (serving.jsonl)"
        self.update()

    def note(self, change: Change) -> None:
        """One line above the bar when an endpoint stalls or rejoins (the bar keeps a
        "stalled" field while any is out); with the bar off, the job log has it."""
        if not self._progress.disable:
            self._progress.console.print(change_line(change), highlight=False)
        self.update()


def stalled_text(names: list[str]) -> str:
    return f"stalled: {', '.join(names)}" if names else ""


def change_line(change: Change) -> str:
    """What the terminal says about a stall change (an endpoint URL and seconds only)."""
    if change.kind == "stalled":
        return (
            f"endpoint {change.endpoint} stalled: nothing advanced for {change.quiet_s:,.0f} s "
            f"with calls in flight; its {change.in_flight} call(s) go to other endpoints, "
            "it is probed again later"
        )
    if change.kind == "rejoined":
        return (
            f"endpoint {change.endpoint} advances again ({change.how}): back in rotation "
            f"after {change.quiet_s:,.0f} s"
        )
    return f"endpoint {change.endpoint} still stalled (its probe call made no progress)"
