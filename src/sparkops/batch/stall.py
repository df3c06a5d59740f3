"""Stalled endpoints: a server that holds calls while nothing it was given advances.

vLLM's /health is answered by its API server even when the engine behind it is hung, so a
health check keeps a deadlocked backend in rotation (Spark users report over an hour). The
client sees what /health does not: whether the calls it sent make progress. This module only
decides; the pool (batch/endpoints.py) acts on its answers by cancelling and re-routing calls.

Pure: every method takes the time (monotonic seconds) from the caller, so the rules are
tested with constructed timelines.

The rules
---------
- Progress of an endpoint is an answer coming back from it (any HTTP answer: a server that
  answers, even with an error, is not hung; retries handle errors), or its prompt plus
  generation token counters (/metrics, read by the job's sampler every --sample-interval)
  changing between two samples.
- The clock runs only while calls are in flight to the endpoint: it starts when the first
  call goes out to an idle endpoint, so an idle endpoint never stalls. A call that timed
  out (--request-timeout shorter than the threshold) does not restart it: a timeout is no
  progress, and otherwise retried timeouts would keep a hung server "idle" forever.
- An endpoint with calls in flight and no progress for `stall_after` seconds is stalled: it
  gets no new calls, and its in-flight calls are cancelled and sent to other endpoints.
- Default `stall_after` (no --stall-after given): the longest of 120 s, 4 sample intervals,
  and 3 times the slowest answer seen so far in this run (a call's expected length, learnt
  from the calls themselves; a queue of a thousand calls answers slowly but steadily).
- A stalled endpoint is probed: `stall_after` after it stalled, one call is sent to it. It
  rejoins as soon as it shows progress (the probe, or a late call, answers; or its counters
  move). A probe with no progress for `stall_after` is cancelled and re-routed too, and the
  next one waits twice as long (at most 8 times `stall_after`).
- When every endpoint is stalled, the job has nowhere to send calls: the caller stops it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkops.batch.options import SAMPLE_INTERVAL_S
from sparkops.jobdir.lines import RunEvent

FLOOR_S = 120.0
SAMPLES = 4  # the counters need a few samples to show movement
SLOWEST_FACTOR = 3.0
PROBE_BACKOFF_MAX = 8


@dataclass(frozen=True)
class StallChange:
    """A change in an endpoint's standing, for the caller to act on and to log.

    kind: "stalled" (stop sending; cancel and re-route its `in_flight` calls), "probe-failed"
    (the probe call made no progress: cancel and re-route it), or "rejoined" (`how`: "answer"
    or "counters"). quiet_s: seconds without progress ("stalled", "probe-failed") or seconds
    it was out of rotation ("rejoined").
    """

    endpoint: str
    kind: str
    t: float
    quiet_s: float
    in_flight: int = 0
    how: str = ""


class EndpointWatch:
    """One endpoint's progress, fed by the pool as calls start and end and samples come in."""

    __slots__ = (
        "_owner",
        "_rejoin",
        "_timed_out",
        "failed_probes",
        "in_flight",
        "last_progress",
        "name",
        "probe_at",
        "probe_started",
        "stalled_since",
        "tokens",
    )

    def __init__(self, name: str, owner: StallWatch) -> None:
        self.name = name
        self.in_flight = 0
        self.last_progress = 0.0
        self.tokens: float | None = None
        self.stalled_since: float | None = None
        self.probe_at = 0.0
        self.probe_started: float | None = None
        self.failed_probes = 0
        self._rejoin = ""
        self._timed_out = False  # a call timed out since the last progress
        self._owner = owner

    @property
    def stalled(self) -> bool:
        return self.stalled_since is not None

    def sent(self, t: float) -> None:
        """A call went out to this endpoint."""
        if self.in_flight == 0 and not self._timed_out:
            self.last_progress = t  # the clock starts with the first call in flight
        self.in_flight += 1

    def ended(
        self, t: float, answered: bool, seconds: float = 0.0, timed_out: bool = False
    ) -> None:
        """A call to this endpoint ended: answered (any HTTP answer, after `seconds`) or not
        (connection error, timeout, cancelled)."""
        self.in_flight = max(0, self.in_flight - 1)
        self._timed_out = self._timed_out or timed_out
        if answered:
            self._owner.slowest = max(self._owner.slowest, seconds)
            self._progress(t, "answer")

    def counters(self, t: float, tokens: float | None) -> None:
        """A /metrics sample: prompt + generation tokens so far (None: no such counters)."""
        if tokens is None:
            return
        if self.tokens is not None and tokens != self.tokens:  # moved (or a restart reset it)
            self._progress(t, "counters")
        self.tokens = tokens

    def probe_due(self, t: float) -> bool:
        return self.stalled_since is not None and self.probe_started is None and t >= self.probe_at

    def _progress(self, t: float, how: str) -> None:
        self.last_progress = t
        self._timed_out = False
        if self.stalled_since is not None and not self._rejoin:
            self._rejoin = how


class StallWatch:
    """Every endpoint's watch, the threshold, and the periodic decision (`check`)."""

    def __init__(
        self, stall_after: float | None = None, sample_interval: float = SAMPLE_INTERVAL_S
    ) -> None:
        self.fixed = stall_after
        self.sample_interval = sample_interval
        self.slowest = 0.0
        self.watches: list[EndpointWatch] = []
        self.n_stalled = 0  # kept by check(): the pool's hot path skips everything while 0

    def add(self, name: str) -> EndpointWatch:
        w = EndpointWatch(name, self)
        self.watches.append(w)
        return w

    @property
    def threshold(self) -> float:
        """Seconds without progress that make an endpoint stalled (see the module rules)."""
        if self.fixed is not None:
            return self.fixed
        return default_stall_after(self.sample_interval, self.slowest)

    def all_stalled(self) -> bool:
        return bool(self.watches) and all(w.stalled for w in self.watches)

    def check(self, t: float) -> list[StallChange]:
        """Changes since the last check, in endpoint order (call it every second or so)."""
        limit = self.threshold
        changes: list[StallChange] = []
        for w in self.watches:
            if w.stalled_since is None:
                quiet = t - w.last_progress
                if w.in_flight > 0 and quiet >= limit:
                    w.stalled_since = t
                    w.probe_at = t + limit
                    w.probe_started = None
                    w.failed_probes = 0
                    self.n_stalled += 1
                    changes.append(StallChange(w.name, "stalled", t, quiet, w.in_flight))
            elif w._rejoin:
                changes.append(
                    StallChange(w.name, "rejoined", t, t - w.stalled_since, how=w._rejoin)
                )
                w.stalled_since = None
                w.probe_started = None
                w._rejoin = ""
                self.n_stalled -= 1
                w.last_progress = t
            elif w.probe_started is not None and t - w.probe_started >= limit:
                w.failed_probes += 1
                w.probe_at = t + limit * min(2**w.failed_probes, PROBE_BACKOFF_MAX)
                changes.append(
                    StallChange(w.name, "probe-failed", t, t - w.probe_started, w.in_flight)
                )
                w.probe_started = None
        return changes


def default_stall_after(sample_interval: float, slowest_answer: float) -> float:
    """The default --stall-after: max(120 s, 4 sample intervals, 3 x the slowest answer)."""
    return max(FLOOR_S, SAMPLES * sample_interval, SLOWEST_FACTOR * slowest_answer)


def log_event(change: StallChange, run: int, wall: float) -> dict[str, Any]:
    """The runs.jsonl line for a change, as JSON."""
    return run_event(change, run, wall).to_json()


def run_event(change: StallChange, run: int, wall: float) -> RunEvent:
    """The runs.jsonl event for a change (the job log; the report reads it back)."""
    extra: dict[str, Any] = {"endpoint": change.endpoint}
    if change.kind == "rejoined":
        extra.update(out_s=round(change.quiet_s, 1), how=change.how)
    else:
        extra.update(quiet_s=round(change.quiet_s, 1), in_flight=change.in_flight)
    return RunEvent(change.kind, run, wall, extra)
