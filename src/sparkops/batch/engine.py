"""The asyncio engine: bounded in-flight calls over a pooled HTTP client, with retries.

Each record carries its state (current step, answers so far). A dispatcher keeps
at most `concurrency` calls in flight and at most `concurrency + lookahead` records active,
pulling new records from the streamed input only when there is room, so memory stays flat
however large the input. Completions come back through a queue (O(1) per call, no
`asyncio.wait` over 1,000 tasks). Ready calls wait in one FIFO per step; which step goes
next is the policy's choice (batch/policy.py). What a record sends and what an answer does
to it is the workload's (batch/workload.py: a pipeline, or an OpenAI batch file); the engine
asks it and never which kind it runs.

What one attempt came to is typed (batch/outcome.py, sent by batch/transport.py, retried by
batch/calls.py); when the job stops is the stop rules' decision (batch/stop_rules.py); how a
record ends is written by batch/fate.py. A failure that is the server's never ends a record
(docs/batch.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import aiohttp

from sparkops import json_codec
from sparkops.batch.admission import Admission
from sparkops.batch.calls import Caller
from sparkops.batch.checks import Checks
from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.fate import Fates, RecordState, Stats
from sparkops.batch.hooks import RunHooks
from sparkops.batch.options import EngineSettings
from sparkops.batch.outcome import Answer, Failure, Outcome, record_failure
from sparkops.batch.policy import Policy, ReadyQueues, default_max_wait, fifo
from sparkops.batch.records import InputProblem, Record
from sparkops.batch.stop_rules import (
    FailFast,
    NoAnswer,
    Stop,
    SuspendDetector,
    Unheld,
    all_stalled,
)
from sparkops.batch.transport import Transport
from sparkops.batch.workload import Finish, RecordError, Workload
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.lines import record_key
from sparkops.openai_http import ServerClient, auth_headers

__all__ = ["Engine", "EngineConfig", "RecordState", "Stats", "Stop"]

_STOP: Any = object()  # put in the completions queue to wake the dispatcher for a stop


class EngineConfig(EngineSettings):
    """The engine's view of the job's settings (batch/options.py, defaults and bounds there)
    plus this run's facts, which are not settings."""

    api_key: str | None = None
    run: int = 1
    # --strict-serving: answers from a model other than the pipeline's stop the job
    strict_model: bool = False


class Engine:
    """Runs a workload's records and journals each finished one."""

    def __init__(
        self,
        cfg: EngineConfig,
        pool: EndpointPool,
        journal: Journal,
        workload: Workload,
        policy: Policy = fifo,
        default_model: str | None = None,
        *,
        hooks: RunHooks | None = None,
        stats: Stats | None = None,
    ) -> None:
        """default_model: the first model the endpoints serve (the pre-flight's), for a
        request that names none and for the check request of a workload without a model.
        hooks: the run's (batch/hooks.py: its stop, where warnings are said, the serving
        epoch; the pool's unless given); stats: the live counters the progress line reads
        (the job's, else new)."""
        self.cfg = cfg
        self.pool = pool
        self.journal = journal
        self.workload = workload
        self.policy = policy
        self.default_model = default_model
        self.hooks = pool.hooks if hooks is None else hooks
        self.stats = Stats() if stats is None else stats
        self._seq = 0
        self.fates = Fates(journal, self.stats, cfg.run, self.hooks)
        self.fail_fast = FailFast(cfg.fail_fast)
        self.no_answer = NoAnswer(cfg.retry_for, last_ok=pool.now())
        # answers outside a constrained step's allowed set, per endpoint
        self.unheld = Unheld(on_warning=self.hooks.say)
        # calls in flight per step, while the dispatcher runs (the job's /metrics reads it)
        self.in_flight_by_step: dict[str, int] = {}

    @property
    def stop_reason(self) -> Stop | None:
        """Why the run stopped early (None: it ran until its input was done)."""
        return self.hooks.stopper.reason

    # ---- dispatcher -------------------------------------------------------------------
    async def run(self, items: Iterator[Record | InputProblem]) -> Stats:
        """Send every record of `items` (the journal's finished ones skipped) over one pooled
        HTTP session: its transport, check requests and caller live as long as it does."""
        conn = aiohttp.TCPConnector(limit=self.cfg.concurrency, limit_per_host=0, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=self.cfg.request_timeout)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            client = ServerClient(session, auth_headers(self.cfg.api_key), self.cfg.request_timeout)
            transport = Transport(client, self.pool, self.cfg.recycle_every, self.cfg.connect_gap)
            checks = Checks(
                transport,
                self.pool,
                self.no_answer,
                self.hooks,
                self.workload.model or self.default_model,
                self.workload.model,
                strict_model=self.cfg.strict_model,
            )
            caller = Caller(
                transport,
                self.pool,
                checks,
                self.no_answer,
                self.stats,
                self.stop,
                self.workload.want_text,
                self.unheld,
            )
            await self._dispatch(items, caller, checks)
        self.journal.sync()
        self.fates.close()
        return self.stats

    async def _dispatch(
        self, items: Iterator[Record | InputProblem], caller: Caller, checks: Checks
    ) -> None:
        """The dispatcher, for as long as the run's stop is listening (`Stopper.running`)."""
        completions: asyncio.Queue[asyncio.Task[tuple[RecordState, Outcome]]] = asyncio.Queue()
        with self.hooks.stopper.running(partial(completions.put_nowait, _STOP)):
            await self._drive(items, caller, checks, completions)

    async def _drive(
        self,
        items: Iterator[Record | InputProblem],
        caller: Caller,
        checks: Checks,
        completions: asyncio.Queue[asyncio.Task[tuple[RecordState, Outcome]]],
    ) -> None:
        loop = asyncio.get_running_loop()
        ready: ReadyQueues[RecordState] = ReadyQueues(
            self.policy, self.cfg.max_wait or default_max_wait(self.cfg.concurrency)
        )
        self.in_flight_by_step = ready.in_flight
        max_active = self.cfg.concurrency + (
            self.cfg.lookahead or max(8, self.cfg.concurrency // 4)
        )
        exhausted = False
        stats = self.stats
        # a steady mix of steps, not cohorts (batch/admission.py)
        admission = Admission(self.cfg.concurrency, self.workload.steps)
        tasks: set[asyncio.Task[tuple[RecordState, Outcome]]] = set()
        watchdog = loop.create_task(self._watchdog(checks))
        try:
            while self.stop_reason is None:
                while not exhausted and (busy := len(ready) + stats.in_flight) < max_active:
                    if busy and not admission.may_admit(busy):
                        break
                    item = next(items, None)
                    if item is None:
                        exhausted = True
                        break
                    state = self._admit(item)
                    if state is not None:
                        admission.admitted()
                        ready.push(state)
                    elif self.stop_reason is not None:
                        return
                while ready and stats.in_flight < self.cfg.concurrency:
                    state = ready.pop()
                    stats.in_flight += 1
                    task = loop.create_task(self._call(state, caller))
                    tasks.add(task)
                    task.add_done_callback(completions.put_nowait)
                if stats.in_flight == 0 and not ready and exhausted:
                    self.fail_fast.release()
                    return
                task = await completions.get()
                while task is not _STOP:
                    tasks.discard(task)
                    stats.in_flight -= 1
                    state, outcome = task.result()
                    ready.done(state.step)
                    if not state.steps:  # its first call (none answered before it)
                        admission.first_call_done()
                    nxt = self._advance(state, outcome, checks)
                    if nxt is not None:
                        ready.push(nxt)
                    else:
                        admission.record_left(len(state.steps))
                    if self.stop_reason is not None:
                        return
                    try:
                        task = completions.get_nowait()
                    except asyncio.QueueEmpty:
                        break
        finally:
            # Stopped, interrupted or crashed: cancel what is in flight and wait for it, so
            # no task outlives the HTTP session ("Session is closed") or dies unretrieved.
            watchdog.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(watchdog, *tasks, return_exceptions=True)
            stats.in_flight = 0

    def stop(self, reason: Stop) -> None:
        """Stop the job soon (the run's stop, batch/hooks.py): in-flight calls are cancelled
        and their records stay unfinished, so running the same command again sends them."""
        self.hooks.stop(reason)

    async def _watchdog(self, checks: Checks) -> None:
        """The stop rules, every period: stalled endpoints, the job-level no-answer deadline.

        Its own ticks also show when the client was suspended: that time is discounted from
        every window (the pool's clock) before any rule looks at it.
        """
        period = min(1.0, max(0.05, self.cfg.retry_for / 20))
        suspend = SuspendDetector(period)
        tick = time.monotonic()
        self.pool.watchdog_started(tick, period)
        suspend.tick(tick)
        while True:
            await asyncio.sleep(period)
            tick = time.monotonic()
            # one step, no await between: the pool's clock counts the gap as unseen until
            # here, and as `suspended` from here (batch/endpoints.py)
            self.pool.watchdog_ticked(tick, suspend.tick(tick))
            if self.pool.stalls is not None:
                self.pool.check()
                stop = all_stalled(self.pool)
                if stop is not None and not await checks.stalled_alone():
                    self.stop(stop)
                    return
            if self.no_answer.due(self.pool.now()):
                self.stop(self.no_answer.stop())
                return

    # ---- records in and out -----------------------------------------------------------
    def _fail(self, failure: Failure, finish: Finish) -> None:
        """A record's own failure: journal it, or hold it back while fail-fast watches."""
        if (stop := self.fail_fast.fail(failure, finish)) is not None:
            self.stop(stop)

    def _admit(self, item: Record | InputProblem) -> RecordState | None:
        """A new input item: journal input problems, skip finished ids, else make it ready."""
        j = self.journal
        if isinstance(item, InputProblem):
            key = record_key(item.id, item.line)
            if key in j.done:
                self.stats.skipped += 1
                return None
            failure = record_failure(item.message)  # no HTTP answer: the line was not sent
            self._fail(failure, self.workload.input_problem(item, failure, self.fates))
            return None
        if item.id in j.done:
            self.stats.skipped += 1
            return None
        self._seq += 1
        return RecordState(item, self.workload.first_step, self._seq)

    def _advance(self, state: RecordState, result: Outcome, checks: Checks) -> RecordState | None:
        """Hand the outcome to the workload; re-queue the record at its next step, if any."""
        if isinstance(result, Failure):
            if result.is_servers_fault:
                return None  # the job is stopping: the record stays unfinished, a resume sends it
            self._fail(result, self.workload.failed(state, result, self.fates))
            return None
        if self.fail_fast.watching:
            self.fail_fast.release()
        if not checks.answered_by(result.model):
            return None  # --strict-serving refused it: unfinished, a resume sends it again
        nxt = self.workload.answered(state, result, self.fates)
        if nxt is None:
            return None  # finished: its fate is written
        state.step = nxt
        self._seq += 1
        state.ready_seq = self._seq
        return state

    # ---- one call with retries --------------------------------------------------------
    async def _call(self, state: RecordState, caller: Caller) -> tuple[RecordState, Outcome]:
        """The record's next request, sent with retries (batch/calls.py)."""
        try:
            url_path, body = self.workload.request(state, self.default_model)
        except RecordError as err:
            return state, record_failure(f"line {state.record.line}: {err}")
        payload = json_codec.encode(body)
        judge = self.workload.judge

        def judged(answer: Answer) -> Failure | None:
            return judge(state, answer)

        return state, await caller.send(url_path, payload, state.record.id, judged)
