"""What a person running a job sees: done/total, records/min, hit rate, in flight, errors,
ETA, and which endpoints are stalled (out of rotation, see batch/stall.py).

On a terminal this is a live rich bar. Off a terminal (a systemd unit, so journald and
`journalctl -u sparkops-batch-NAME -f`; a pipe; a log file) a bar would print nothing
until the end, so the same figures go to stderr as one plain status line every
`status_interval` seconds (JobConfig's `--status-interval`, 30 s) and once at the end;
stall and serving changes are plain lines too. Records/min counts records done, not
errors (a job failing fast must not look fast); the ETA uses every finished record.

Counts, rates and redacted endpoint URLs only; no record text, no ids, ever reaches the
terminal or the journal.

The status line's opening, `sparkops: DONE/TOTAL finished:`, is what `sparkops batch units`
(so status.yml, from the controller) looks for in a job unit's journal to show the same line
(jobunit/progress.py): keep it. `--no-progress` turns the lines off; the interval is never 0.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sparkops.batch.engine import Stats
from sparkops.batch.options import STATUS_INTERVAL_S
from sparkops.batch.stall import StallChange
from sparkops.privacy import redact


class ProgressView:
    def __init__(
        self,
        stats: Stats,
        total: int,
        already: int,
        enabled: bool = True,
        endpoints: Sequence[str] = (),
        status_interval: float = STATUS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """endpoints: the job's, as every message names them (redacted): the order stalled
        ones are listed in. Which are stalled the view learns from the changes it is told
        (`note`), so it needs no hold on the pool. `clock` (seconds, monotonic) paces the
        status lines and the rates: a test moves it by hand instead of waiting."""
        self.stats = stats
        self.total = total
        self.already = already
        self._order = {name: i for i, name in enumerate(endpoints)}
        self._stalled: set[str] = set()
        self.console = Console(stderr=True)
        # rich only on a terminal; elsewhere plain status lines (when progress is wanted)
        self.lines = enabled and not self.console.is_terminal
        self.status_interval = status_interval
        self._clock = clock
        self._t0 = clock()
        self._last_line = self._t0
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
            disable=not enabled or self.lines,
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
        if self.lines:
            self._status_line()

    def update(self) -> None:
        """Refresh the bar; off a terminal, print the status line when one is due."""
        s = self.stats
        finished = s.done + s.errors
        rpm = self.records_per_min()
        self._update_bar(s, finished, f"{rpm:,.0f}" if rpm is not None else "-")
        if self.lines and self._clock() - self._last_line >= self.status_interval:
            self._status_line()

    def records_per_min(self) -> float | None:
        """Records done (not errors) per minute of this run; None before there is a figure."""
        elapsed = self._clock() - self._t0
        return self.stats.done / elapsed * 60 if elapsed > 1 and self.stats.done else None

    def eta_s(self) -> float | None:
        """Seconds left at this run's pace of finished records (done or errors)."""
        finished = self.stats.done + self.stats.errors
        elapsed = self._clock() - self._t0
        left = self.total - self.already - finished
        if left <= 0:
            return 0.0
        return left / (finished / elapsed) if finished and elapsed > 0 else None

    def status_text(self) -> str:
        """The status line: counts and rates only (never record text or ids)."""
        s = self.stats
        rpm = self.records_per_min()
        eta = self.eta_s()
        stalled = stalled_text(self.stalled_names())
        return "; ".join(
            t
            for t in (
                f"sparkops: {self.already + s.done + s.errors:,}/{self.total:,} finished: "
                f"{s.done:,} done, {s.errors:,} errors, {s.in_flight:,} in flight",
                f"{rpm:,.0f} records/min" if rpm is not None else "- records/min",
                f"prefix cache hit {s.hit_rate:.1%}" if s.hit_rate is not None else "hit -",
                f"ETA {timedelta(seconds=round(eta))}" if eta is not None else "ETA -",
                stalled,
                self.drift,
            )
            if t
        )

    def _status_line(self) -> None:
        self._last_line = self._clock()
        print(self.status_text(), file=sys.stderr, flush=True)

    def _update_bar(self, s: Stats, finished: int, rpm: str) -> None:
        hit = f"{s.hit_rate:.1%}" if s.hit_rate is not None else "-"
        self._progress.update(
            self._task,
            completed=self.already + finished,  # skipped records are among `already`
            rpm=rpm,
            hit=hit,
            inflight=s.in_flight,
            errors=s.errors,
            stalled=" ".join(t for t in (stalled_text(self.stalled_names()), self.drift) if t),
        )

    def say(self, text: str) -> None:
        """One line above the bar (or, with the bar off, a warning on stderr): for events a
        user must see even without the live display, such as a change of what serves the job.
        """
        text = redact(text)  # it may name an endpoint
        if self._progress.disable:
            print(f"sparkops: warning: {text}", file=sys.stderr, flush=True)
        else:
            self._progress.console.print(text, soft_wrap=True, highlight=False, markup=False)
        self.drift = "serving changed (serving.jsonl)"
        self.update()

    def stalled_names(self) -> list[str]:
        """The endpoints out of rotation now, in the job's order."""
        return sorted(self._stalled, key=lambda name: self._order.get(name, len(self._order)))

    def note(self, change: StallChange) -> None:
        """One line above the bar when an endpoint stalls or rejoins (the bar keeps a
        "stalled" field while any is out); with the bar off, the job log has it."""
        if change.kind == "stalled":
            self._stalled.add(change.endpoint)
        elif change.kind == "rejoined":
            self._stalled.discard(change.endpoint)
        if self.lines:
            print(f"sparkops: {change_line(change)}", file=sys.stderr, flush=True)
        elif not self._progress.disable:
            self._progress.console.print(change_line(change), highlight=False)
        self.update()


def stalled_text(names: list[str]) -> str:
    return f"stalled: {', '.join(names)}" if names else ""


def change_line(change: StallChange) -> str:
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
