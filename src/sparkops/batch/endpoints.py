"""Several vLLM endpoints (or one LiteLLM URL): spread calls by least outstanding requests.

An endpoint whose call failed with the server's fault (refused, reset, a 5xx, 401/403/404:
batch/outcome.py) is benched for a short, growing while, so a dead or misconfigured server
does not swallow every call (fast failures would otherwise make it look idle) and its calls
go to the others; its first answer brings it back.

An endpoint that accepts calls but makes no progress (a hung engine behind a /health that
still answers) is taken out of rotation by the stall watch (batch/stall.py decides; the
pool acts): the asyncio tasks with a call in flight there are cancelled with a mark, the
engine sees the mark (`take_reroute`) and sends the call to another endpoint at once.
Nothing is journalled for a cancelled call, so each record is still finished exactly once.

The pool's clock (`now`) is monotonic time less the seconds the client itself was suspended
(`suspended`, found by the engine's watchdog): the stall windows and the job's deadlines
measure the server, not a closed laptop lid. A suspension the watchdog has not yet ticked
through counts too (`watchdog_tick`): on SIGCONT, calls whose timeouts passed during the
pause wake before the watchdog does, and their deadlines must not have passed with them (a
3-minute pause with 1,000 in flight journalled 727 "gave up after 1 attempts": issue 37).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from sparkops.batch.hooks import RunHooks
from sparkops.batch.options import SAMPLE_INTERVAL_S
from sparkops.batch.outcome import REROUTED, STALLED_ALONE, Failure
from sparkops.batch.stall import EndpointWatch, StallChange, StallWatch
from sparkops.openai_http import normalise_base
from sparkops.privacy import redact

# A watchdog tick this much later than its period means the client was not running.
SUSPEND_SLACK_S = 2.0


def metrics_url(base: str) -> str:
    """Where the endpoint at `base` (normalised) serves its Prometheus /metrics page."""
    return base + "/metrics"


@dataclass
class Endpoint:
    base: str
    outstanding: int = 0
    down_until: float = 0.0
    failures: int = 0
    sent: int = 0
    watch: EndpointWatch | None = None
    # tasks with a call in flight here: cancelled (and re-routed) when the endpoint stalls
    calls: set[asyncio.Task] = field(default_factory=set)

    @property
    def stalled(self) -> bool:
        return self.watch is not None and self.watch.stalled

    @property
    def name(self) -> str:
        """The endpoint as every file and message shows it: credentials redacted."""
        return redact(self.base)

    @property
    def chat_url(self) -> str:
        return self.base + "/v1/chat/completions"

    @property
    def metrics_url(self) -> str:
        return metrics_url(self.base)


@dataclass
class EndpointPool:
    endpoints: list[Endpoint]
    _rr: int = field(default=0)
    stalls: StallWatch | None = None
    # the run's hooks: each StallChange the stall watch reports is noted there (the job logs it
    # to runs.jsonl and says it on the progress line)
    hooks: RunHooks = field(default_factory=RunHooks)
    rerouted: int = 0  # calls cancelled on a stalled endpoint and sent elsewhere
    suspended: float = 0.0  # seconds the client was not running (SIGSTOP, suspend)
    # the engine watchdog's last tick (raw monotonic) and period: a tick this late is a
    # suspension already, before the watchdog wakes to add it to `suspended`
    watchdog_tick: float | None = None
    watchdog_period: float = 1.0
    # cancelled calls -> the failure their attempt returns (re-routed, or stalled alone)
    _marked: dict[asyncio.Task, Failure] = field(default_factory=dict)

    def now(self) -> float:
        """Monotonic seconds the client has been running (see the module docstring)."""
        raw = time.monotonic()
        return raw - self.suspended - self.unseen_suspension(raw)

    def unseen_suspension(self, raw: float) -> float:
        """Seconds of a suspension still under way or not yet ticked through (the same rule
        the watchdog adds to `suspended` at its next tick, so the clock does not jump)."""
        if self.watchdog_tick is None:
            return 0.0
        late = raw - self.watchdog_tick - self.watchdog_period
        return late if late > SUSPEND_SLACK_S else 0.0

    def watchdog_started(self, tick: float, period: float) -> None:
        """The engine's watchdog ticks every `period` s from `tick` (raw monotonic)."""
        self.watchdog_tick, self.watchdog_period = tick, period

    def watchdog_ticked(self, tick: float, suspended: float) -> None:
        """A watchdog tick at `tick`, finding the client was suspended `suspended` s since the
        last one (one step: the clock counts that gap as unseen until here, after as
        `suspended`)."""
        self.suspended += suspended
        self.watchdog_tick = tick

    @classmethod
    def from_urls(
        cls,
        urls: list[str],
        stall_after: float | None = None,
        sample_interval: float = SAMPLE_INTERVAL_S,
        hooks: RunHooks | None = None,
    ) -> EndpointPool:
        """stall_after: seconds without progress before an endpoint counts as stalled (None:
        the default rule in batch/stall.py; 0: never). hooks: the run's (stall changes are
        noted there)."""
        stalls = StallWatch(stall_after, sample_interval) if stall_after != 0 else None
        endpoints = []
        for url in urls:
            base = normalise_base(url)
            watch = stalls.add(redact(base)) if stalls is not None else None
            endpoints.append(Endpoint(base, watch=watch))
        return cls(endpoints, stalls=stalls, hooks=RunHooks() if hooks is None else hooks)

    def pick(self, now: float | None = None) -> Endpoint:
        """Healthy endpoint with fewest outstanding calls (round robin among ties).

        A stalled endpoint gets no calls except, when its probe is due, this one."""
        if len(self.endpoints) == 1 and not (self.stalls is not None and self.stalls.n_stalled):
            return self.endpoints[0]  # every call of a one-endpoint job: nothing to choose
        now = self.now() if now is None else now
        live = self.endpoints
        if self.stalls is not None and self.stalls.n_stalled:
            for e in self.endpoints:
                if e.watch is not None and e.watch.probe_due(now):
                    e.watch.probe_started = now
                    return e
            live = [e for e in self.endpoints if not e.stalled] or self.endpoints
        healthy = [e for e in live if e.down_until <= now] or live
        self._rr += 1
        n = len(healthy)
        best = min(range(n), key=lambda i: (healthy[i].outstanding, (i - self._rr) % n))
        return healthy[best]

    def mark_down(self, ep: Endpoint, now: float | None = None) -> None:
        now = self.now() if now is None else now
        ep.failures += 1
        ep.down_until = now + min(30.0, 0.5 * 2 ** min(ep.failures, 6))

    def mark_up(self, ep: Endpoint) -> None:
        ep.failures = 0
        ep.down_until = 0.0

    # ---- stalled endpoints (batch/stall.py decides, the pool acts) ----------------------
    def call_started(self, ep: Endpoint, now: float) -> None:
        """A call to `ep` is about to go out from the current task."""
        if ep.watch is not None:
            task = asyncio.current_task()
            if task is not None:
                ep.calls.add(task)
            ep.watch.sent(now)

    def call_ended(
        self, ep: Endpoint, now: float, answered: bool, seconds: float, timed_out: bool = False
    ) -> None:
        if ep.watch is not None:
            ep.calls.discard(asyncio.current_task())
            ep.watch.ended(now, answered, seconds, timed_out)

    def observe(self, ep: Endpoint, values: dict[str, float], now: float | None = None) -> None:
        """A /metrics sample of `ep`: its token counters show whether its engine advances."""
        now = self.now() if now is None else now
        if ep.watch is not None and ("prompt_tokens" in values or "generation_tokens" in values):
            tokens = values.get("prompt_tokens", 0.0) + values.get("generation_tokens", 0.0)
            ep.watch.counters(now, tokens)

    def check(self, now: float | None = None) -> list[StallChange]:
        """Ask the stall watch; cancel (marked for re-routing) the calls of a stalled
        endpoint and of a failed probe; note each change in the run's hooks."""
        if self.stalls is None:
            return []
        now = self.now() if now is None else now
        changes = self.stalls.check(now)
        by_base = {e.name: e for e in self.endpoints}
        for change in changes:
            ep = by_base[change.endpoint]
            if change.kind in ("stalled", "probe-failed"):
                self.rerouted += self._cancel_calls(ep, REROUTED)
            self.hooks.note(change)
        return changes

    def cancel_alone(self, ep: Endpoint) -> int:
        """`ep` answered a check request while its calls hung: those calls are their records'
        own hang, cancelled as STALLED_ALONE (batch/checks.py)."""
        return self._cancel_calls(ep, STALLED_ALONE)

    def _cancel_calls(self, ep: Endpoint, why: Failure) -> int:
        n = 0
        for task in list(ep.calls):
            if task not in self._marked and not task.done():
                self._marked[task] = why
                task.cancel()
                n += 1
        ep.calls.clear()
        return n

    def take_reroute(self, task: asyncio.Task | None) -> Failure | None:
        """The failure a call cancelled by the pool returns (None when `task` was not, or was
        also cancelled by a job stop): the caller swallows the CancelledError."""
        if task is None or task not in self._marked:
            return None
        why = self._marked.pop(task)
        return why if task.uncancel() == 0 else None

    def all_stalled(self) -> bool:
        return self.stalls is not None and self.stalls.all_stalled()

    def stalled_names(self) -> list[str]:
        return [e.name for e in self.endpoints if e.stalled]
