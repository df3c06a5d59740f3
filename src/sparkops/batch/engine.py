"""The asyncio engine: bounded in-flight calls over a pooled HTTP client, with retries.

Each record carries its pipeline state (current step, answers so far). A dispatcher keeps
at most `concurrency` calls in flight and at most `concurrency + lookahead` records active,
pulling new records from the streamed input only when there is room, so memory stays flat
however large the input. Completions come back through a queue (O(1) per call, no
`asyncio.wait` over 1,000 tasks). Ready calls wait in one FIFO per step; which step goes
next is the policy's choice (batch/policy.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sparkops.batch import openai_batch
from sparkops.batch.admission import Admission
from sparkops.batch.connections import ConnectionRecycler, ConnectPacer
from sparkops.batch.endpoints import Endpoint, EndpointPool
from sparkops.batch.journal import Journal
from sparkops.batch.options import EngineSettings
from sparkops.batch.policy import Policy, ReadyQueues, default_max_wait, fifo
from sparkops.batch.records import InputProblem, Record
from sparkops.batch.retry import backoff_delay, error_cause, is_retryable, retry_after_seconds
from sparkops.pipeline.parse import parse_answer
from sparkops.pipeline.prompt import RecordError, build_request
from sparkops.pipeline.route import next_step
from sparkops.pipeline.spec import PipelineSpec


@dataclass
class CallResult:
    """Outcome of one HTTP call after retries: a body, or a final error."""

    status: int
    body: dict[str, Any] | None
    error: str | None
    request_id: str | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class Stop:
    """Why a job stopped before its input was done (every unfinished record resumes).

    kind: "signal" (SIGINT/SIGTERM; `signum` set), "fail-fast" (the first calls all failed
    with one cause), "no-answer" (no endpoint answered for --retry-for seconds), "stalled"
    (every endpoint stalled) or "serving-changed" (--strict-serving saw an endpoint's
    identity change, batch/serving.py).
    """

    kind: str
    message: str
    signum: int | None = None


_STOP: Any = object()  # put in the completions queue to wake the dispatcher for a stop
# _post's result for a call cancelled because its endpoint stalled: _call sends it elsewhere
_REROUTED = CallResult(0, None, "re-routed: its endpoint stalled")


@dataclass
class RecordState:
    """A record moving through the pipeline (one call in flight at most)."""

    record: Record
    step: str
    ready_seq: int = 0
    started: float = field(default_factory=time.time)
    steps: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Stats:
    """Live counters the progress display and the sampler read."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    errors: int = 0
    calls: int = 0
    retries: int = 0
    in_flight: int = 0
    started: float = field(default_factory=time.monotonic)
    hit_rate: float | None = None


class EngineConfig(EngineSettings):
    """The engine's view of the job's settings (batch/options.py, defaults and bounds there)
    plus this run's facts, which are not settings."""

    api_key: str | None = None
    run: int = 1


class Engine:
    """Runs records through a pipeline (or OpenAI batch lines) and journals each finished one."""

    def __init__(
        self,
        cfg: EngineConfig,
        pool: EndpointPool,
        journal: Journal,
        pipeline: PipelineSpec | None,
        policy: Policy = fifo,
        default_model: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.pool = pool
        self.journal = journal
        self.pipeline = pipeline
        self.policy = policy
        self.default_model = default_model
        self.stats = Stats()
        self._seq = 0
        self.stop_reason: Stop | None = None
        self.causes: Counter[str] = Counter()  # error cause -> records journalled with it
        # Fail-fast: the first errors are held back (not journalled, so a re-run sends those
        # records again) until a call succeeds or `fail_fast` of them share one cause.
        self._held: list[tuple[str, Callable[[], None]]] | None = [] if cfg.fail_fast > 0 else None
        # Job-level deadline: when calls fail and nothing has answered for retry_for, stop.
        self._last_ok = time.monotonic()
        self._failing = False
        self._last_failure = ""
        # Since the last answer: records whose calls failed, and whether a connection was
        # refused. One record failing alone (a prompt the server always answers 500) is that
        # record's error, not an outage: the job stops only when the server is unreachable
        # or calls of two or more records fail.
        self._failing_ids: set[str] = set()
        self._unreachable = False
        self._completions: asyncio.Queue | None = None
        self._over = False  # the dispatcher has returned: a late stop() changes nothing
        # OpenAI batch jobs: the kit's own per-request fields go to a side file (openai_batch)
        self._meta = openai_batch.MetaWriter(journal.dir) if pipeline is None else None
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            self._headers["Authorization"] = f"Bearer {cfg.api_key}"
        self._conns = ConnectionRecycler(self._headers, cfg.recycle_every)
        self._pacer = ConnectPacer(cfg.connect_gap)
        # The job's serving epoch (batch/serving.py): 0 as the job found its endpoints, +1 at
        # every identity change; each finished record carries it, the boundary in the results.
        self.serving = 0

    # ---- dispatcher -------------------------------------------------------------------
    async def run(self, items: Iterator[Record | InputProblem]) -> Stats:
        conn = aiohttp.TCPConnector(limit=self.cfg.concurrency, limit_per_host=0, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=self.cfg.request_timeout)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            self._session = session
            await self._dispatch(items)
        self.journal.sync()
        if self._meta is not None:
            self._meta.close()
        return self.stats

    async def _dispatch(self, items: Iterator[Record | InputProblem]) -> None:
        loop = asyncio.get_running_loop()
        completions: asyncio.Queue[asyncio.Task[tuple[RecordState, CallResult]]] = asyncio.Queue()
        self._completions = completions
        ready: ReadyQueues[RecordState] = ReadyQueues(
            self.policy, self.cfg.max_wait or default_max_wait(self.cfg.concurrency)
        )
        max_active = self.cfg.concurrency + (
            self.cfg.lookahead or max(8, self.cfg.concurrency // 4)
        )
        exhausted = False
        stats = self.stats
        # a steady mix of steps, not cohorts (batch/admission.py)
        admission = Admission(
            self.cfg.concurrency, len(self.pipeline.steps) if self.pipeline else 1
        )
        tasks: set[asyncio.Task[tuple[RecordState, CallResult]]] = set()
        watchdog = loop.create_task(self._watchdog())
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
                    task = loop.create_task(self._call(state))
                    tasks.add(task)
                    task.add_done_callback(completions.put_nowait)
                if stats.in_flight == 0 and not ready and exhausted:
                    self._release_held()
                    return
                task = await completions.get()
                while task is not _STOP:
                    tasks.discard(task)
                    stats.in_flight -= 1
                    state, result = task.result()
                    ready.done(state.step)
                    if not state.steps:  # its first call (none answered before it)
                        admission.first_call_done()
                    nxt = self._advance(state, result)
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
            self._over = True

    def stop(self, reason: Stop) -> None:
        """Stop the job soon (signal handler, watchdog): in-flight calls are cancelled and
        their records stay unfinished, so running the same command again sends them."""
        if self._over:
            return
        if self.stop_reason is None:
            self.stop_reason = reason
        if self._completions is not None:
            self._completions.put_nowait(_STOP)

    async def _watchdog(self) -> None:
        """The job-level deadline: calls fail and no endpoint has answered for retry_for.

        One clock for the whole job, so a dead server costs retry_for once, not once per
        queued call.
        """
        period = min(1.0, max(0.05, self.cfg.retry_for / 20))
        while True:
            await asyncio.sleep(period)
            if self.pool.stalls is not None and self._check_stalls():
                return
            if self._no_answer():
                self._stop_no_answer()
                return

    def _no_answer(self) -> bool:
        return (
            self._failing
            and time.monotonic() - self._last_ok >= self.cfg.retry_for
            and (self._unreachable or len(self._failing_ids) > 1)
        )

    def _stop_no_answer(self) -> None:
        self.stop(
            Stop(
                "no-answer",
                f"no endpoint has answered for {self.cfg.retry_for:g} s (last: "
                f"{self._last_failure}); start or fix the server, then run the same command "
                "again to resume",
            )
        )

    # ---- stalled endpoints (batch/stall.py decides; the pool cancels and re-routes) -----
    def _check_stalls(self) -> bool:
        """Take stalled endpoints out of rotation (their calls go elsewhere, see _post);
        stop the job when every endpoint has stalled. True when it stopped."""
        self.pool.check()
        if not self.pool.all_stalled():
            return False
        assert self.pool.stalls is not None
        self.stop(
            Stop(
                "stalled",
                f"every endpoint stalled ({', '.join(self.pool.stalled_names())}): calls were "
                f"in flight and nothing advanced for {self.pool.stalls.threshold:g} s (a hung "
                "engine; /health may still answer); restart the server, then run the same "
                "command again to resume",
            )
        )
        return True

    # ---- fail fast --------------------------------------------------------------------
    def _fail(self, message: str, finish: Callable[[], None]) -> None:
        """A record failed: journal it, or hold it back while fail-fast is still watching."""
        cause = error_cause(message)
        held = self._held
        if held is None:
            self.causes[cause] += 1
            finish()
            return
        held.append((cause, finish))
        if len(held) < self.cfg.fail_fast:
            return
        if len({c for c, _ in held}) == 1:
            self.stop(
                Stop(
                    "fail-fast",
                    f"the first {len(held)} records all failed with the same cause: {cause}; "
                    "none of them was recorded as finished, so once the cause is fixed the "
                    "same command sends them again (--fail-fast 0 turns this check off)",
                )
            )
            return
        self._release_held()

    def _release_held(self) -> None:
        """Fail-fast is over (a call succeeded, or the causes differ): journal held errors."""
        held, self._held = self._held, None
        for cause, finish in held or ():
            self.causes[cause] += 1
            finish()

    def _admit(self, item: Record | InputProblem) -> RecordState | None:
        """A new input item: journal input problems, skip finished ids, else make it ready."""
        j = self.journal
        if isinstance(item, InputProblem):
            key = item.id if item.id is not None else f"\x00line:{item.line}"
            if key in j.done:
                self.stats.skipped += 1
                return None
            if self.pipeline is None:
                self._fail(
                    item.message,
                    lambda: self._finish_openai(
                        RecordState(Record(item.id or "", item.line, {}), "request"),
                        CallResult(0, None, item.message),  # no HTTP answer: the line was not sent
                        custom_id=item.id,
                    ),
                )
            else:
                self._fail(
                    item.message,
                    lambda: self._finish_error(item.id, item.line, item.message, []),
                )
            return None
        if item.id in j.done:
            self.stats.skipped += 1
            return None
        step = self.pipeline.first.name if self.pipeline else "request"
        self._seq += 1
        return RecordState(item, step, self._seq)

    def _advance(self, state: RecordState, result: CallResult) -> RecordState | None:
        """Record the answer, route, and either re-queue the record or journal it."""
        if result.error is not None:
            if self.pipeline is None:
                self._fail(result.error, lambda: self._finish_openai(state, result))
            else:
                err = result.error
                self._fail(
                    err,
                    lambda: self._finish_error(
                        state.record.id, state.record.line, err, state.steps, state.started
                    ),
                )
            return None
        if self._held is not None:
            self._release_held()
        if self.pipeline is None:
            self._finish_openai(state, result)
            return None
        step = self.pipeline.step(state.step)
        body = result.body or {}
        text = _content(body)
        label = parse_answer(text, step.parse)
        usage = body.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        state.steps.append(
            {
                "step": step.name,
                "answer": label,
                "raw": text,
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "cached_tokens": details.get("cached_tokens"),
            }
        )
        nxt = next_step(self.pipeline, step.name, label)
        if nxt is None:
            self._finish_done(state, label)
            return None
        state.step = nxt
        self._seq += 1
        state.ready_seq = self._seq
        return state

    # ---- journal lines ----------------------------------------------------------------
    def _finish_done(self, state: RecordState, final: str) -> None:
        self.journal.append(
            {
                "id": state.record.id,
                "status": "done",
                "final": final,
                "steps": state.steps,
                "error": None,
                "line": state.record.line,
                "t0": round(state.started, 3),
                "t": round(time.time(), 3),
                "run": self.cfg.run,
                "serving": self.serving,
            }
        )
        self.stats.done += 1

    def _finish_error(
        self,
        rid: str | None,
        line: int,
        message: str,
        steps: list,
        started: float | None = None,
    ) -> None:
        self.journal.append(
            {
                "id": rid,
                "status": "error",
                "final": None,
                "steps": steps,
                "error": message,
                "line": line,
                "t0": None if started is None else round(started, 3),
                "t": round(time.time(), 3),
                "run": self.cfg.run,
                "serving": self.serving,
            }
        )
        self.stats.errors += 1

    def _finish_openai(
        self, state: RecordState, result: CallResult, custom_id: str | None = ""
    ) -> None:
        """Journal an OpenAI batch output line (built by openai_batch), then its meta line."""
        rid = state.record.id if custom_id == "" else custom_id
        line = state.record.line
        ok = openai_batch.is_success(result.status, result.body, result.error)
        self.journal.append(
            openai_batch.output_line(
                rid, line, result.status, result.body, result.error, result.request_id
            )
        )
        assert self._meta is not None
        meta = openai_batch.meta_line(
            rid, line, ok, result.body, self.cfg.run, state.started, time.time()
        )
        meta["serving"] = self.serving
        self._meta.append(meta)
        if ok:
            self.stats.done += 1
        else:
            self.stats.errors += 1

    # ---- one call with retries --------------------------------------------------------
    async def _call(self, state: RecordState) -> tuple[RecordState, CallResult]:
        try:
            url_path, body = self._request(state)
        except RecordError as err:
            return state, CallResult(0, None, f"line {state.record.line}: {err}")
        payload = json.dumps(body).encode()
        deadline = time.monotonic() + self.cfg.retry_for
        attempt = 0
        while True:
            attempt += 1
            ep = self.pool.pick()
            result, retry, conn_error = await self._post(ep, url_path, payload)
            if result is _REROUTED:  # its endpoint stalled: send it to another one now
                attempt -= 1
                continue
            if not retry:
                self.stats.calls += 1
                if conn_error is False:
                    self.pool.mark_up(ep)
                self._last_ok = time.monotonic()
                if self._failing:
                    self._failing = self._unreachable = False
                    self._failing_ids.clear()
                return state, result
            self._failing = True
            self._failing_ids.add(state.record.id)
            self._last_failure = result.error or f"HTTP {result.status}"
            if conn_error and "Timeout" not in self._last_failure:
                self._unreachable = True  # refused or reset: no server there, whatever the record
            if conn_error:
                self.pool.mark_down(ep)
            if time.monotonic() >= deadline:
                if self._no_answer():
                    # Nothing answered all this time: the job stops (this record resumes);
                    # a record error here would finish every queued record as "gave up".
                    self._stop_no_answer()
                    return state, result
                self.stats.calls += 1
                return state, CallResult(  # the last answer's body (an OpenAI error line)
                    result.status, result.body, f"gave up after {attempt} attempts: {result.error}"
                )
            self.stats.retries += 1
            delay = backoff_delay(attempt)
            if result.retry_after is not None and result.retry_after > delay:
                delay = result.retry_after
            await asyncio.sleep(delay)

    def _request(self, state: RecordState) -> tuple[str, dict[str, Any]]:
        rec = state.record
        if self.pipeline is None:
            body = dict(rec.fields["body"])
            if "model" not in body and self.default_model:
                body["model"] = self.default_model
            return rec.fields.get("url", "/v1/chat/completions"), body
        step = self.pipeline.step(state.step)
        return "/v1/chat/completions", build_request(step, self.pipeline.model, rec.fields)

    async def _post(
        self, ep: Endpoint, path: str, payload: bytes
    ) -> tuple[CallResult, bool, bool | None]:
        """One attempt. Returns (result, retry?, connection_error?)."""
        assert self._session is not None
        ep.outstanding += 1
        ep.sent += 1
        started = time.monotonic()
        self.pool.call_started(ep, started)  # stall watch: this task has a call in flight here
        answered = timed_out = False
        try:
            if (wait := self._pacer.turn(ep.base, ep.outstanding)) > 0:  # a new connection
                await asyncio.sleep(wait)
            async with self._session.post(
                ep.base + path, data=payload, headers=self._conns.headers()
            ) as resp:
                raw = await resp.read()
                answered = True
                status = resp.status
                rid = resp.headers.get("x-request-id")
                retry_after = resp.headers.get("Retry-After") if status != 200 else None
        except asyncio.CancelledError:
            if not self.pool.take_reroute(asyncio.current_task()):
                raise  # the job is stopping
            return _REROUTED, True, None  # cancelled because the endpoint stalled
        except (aiohttp.ClientError, OSError) as err:  # refused, reset, bad payload, ...
            return CallResult(0, None, f"connection error: {type(err).__name__}"), True, True
        except TimeoutError:
            timed_out = True
            return CallResult(0, None, "timed out"), True, None
        finally:
            ep.outstanding -= 1
            now = time.monotonic()
            self.pool.call_ended(ep, now, answered, now - started, timed_out)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if status == 200:
            problem = _answer_problem(path, body)
            if problem is None:
                assert isinstance(body, dict)
                return CallResult(200, body, None, body.get("id") or rid), False, False
            if problem.startswith("HTTP 200 with a malformed choice"):
                return CallResult(200, None, problem, rid), False, False
            # No answer in it (a proxy's page, an empty object): a failed call, retried
            return CallResult(200, None, problem), True, None
        message = _error_message(body, raw)
        if is_retryable(status):
            retry_in = retry_after_seconds(retry_after)
            err_body = body if isinstance(body, dict) else None
            return (
                CallResult(status, err_body, f"HTTP {status}: {message}", rid, retry_in),
                True,
                None,
            )
        return CallResult(status, body, f"HTTP {status}: {message}", rid), False, False


def _answer_problem(path: str, body: Any) -> str | None:
    """What is wrong with a 200 answer's body, or None when it carries an answer.

    A 200 without `choices` is not a decision (it used to be journalled as "unclear"): it
    is retried like a 5xx. A `choices` element that is not an object is a record error.
    """
    if not isinstance(body, dict):
        return "HTTP 200 with a body that is not a JSON object"
    if path.endswith("/embeddings"):
        return None if isinstance(body.get("data"), list) else "HTTP 200 without data"
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return "HTTP 200 without choices"
    if not isinstance(choices[0], dict):
        return "HTTP 200 with a malformed choice (not a JSON object)"
    return None


def _content(body: dict[str, Any]) -> str:
    try:
        choice = body["choices"][0]
    except (KeyError, IndexError, TypeError):
        return ""
    if not isinstance(choice, dict):
        return ""
    msg = choice.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, str):
        content = choice.get("text")
    return content if isinstance(content, str) else ""


def _error_message(body: Any, raw: bytes) -> str:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        return str(err)[:300]
    return raw[:200].decode("utf-8", "replace")


OnTick = Callable[[Stats], None]
