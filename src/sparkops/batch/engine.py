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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sparkops.batch import openai_batch
from sparkops.batch.endpoints import Endpoint, EndpointPool
from sparkops.batch.journal import Journal
from sparkops.batch.policy import Policy, ReadyQueues, default_max_wait, fifo
from sparkops.batch.records import InputProblem, Record
from sparkops.batch.retry import backoff_delay, is_retryable
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


@dataclass
class EngineConfig:
    concurrency: int = 1000
    lookahead: int | None = None
    request_timeout: float = 600.0
    retry_for: float = 1800.0
    api_key: str | None = None
    run: int = 1
    max_wait: int | None = None


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
        # OpenAI batch jobs: the kit's own per-request fields go to a side file (openai_batch)
        self._meta = openai_batch.MetaWriter(journal.dir) if pipeline is None else None
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            self._headers["Authorization"] = f"Bearer {cfg.api_key}"

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
        ready = ReadyQueues(
            self.policy, self.cfg.max_wait or default_max_wait(self.cfg.concurrency)
        )
        max_active = self.cfg.concurrency + (
            self.cfg.lookahead or max(8, self.cfg.concurrency // 4)
        )
        exhausted = False
        stats = self.stats
        while True:
            while not exhausted and len(ready) + stats.in_flight < max_active:
                item = next(items, None)
                if item is None:
                    exhausted = True
                    break
                state = self._admit(item)
                if state is not None:
                    ready.push(state)
            while ready and stats.in_flight < self.cfg.concurrency:
                state = ready.pop()
                stats.in_flight += 1
                task = loop.create_task(self._call(state))
                task.add_done_callback(completions.put_nowait)
            if stats.in_flight == 0 and not ready and exhausted:
                return
            task = await completions.get()
            while True:
                stats.in_flight -= 1
                state, result = task.result()
                ready.done(state.step)
                nxt = self._advance(state, result)
                if nxt is not None:
                    ready.push(nxt)
                try:
                    task = completions.get_nowait()
                except asyncio.QueueEmpty:
                    break

    def _admit(self, item: Record | InputProblem) -> RecordState | None:
        """A new input item: journal input problems, skip finished ids, else make it ready."""
        j = self.journal
        if isinstance(item, InputProblem):
            key = item.id if item.id is not None else f"\x00line:{item.line}"
            if key in j.done:
                self.stats.skipped += 1
                return None
            if self.pipeline is None:
                self._finish_openai(
                    RecordState(Record(item.id or "", item.line, {}), "request"),
                    CallResult(0, None, item.message),  # no HTTP answer: the line was not sent
                    custom_id=item.id,
                )
            else:
                self._finish_error(item.id, item.line, item.message, [])
            return None
        if item.id in j.done:
            self.stats.skipped += 1
            return None
        step = self.pipeline.first.name if self.pipeline else "request"
        self._seq += 1
        return RecordState(item, step, self._seq)

    def _advance(self, state: RecordState, result: CallResult) -> RecordState | None:
        """Record the answer, route, and either re-queue the record or journal it."""
        if self.pipeline is None:
            self._finish_openai(state, result)
            return None
        if result.error is not None:
            self._finish_error(
                state.record.id, state.record.line, result.error, state.steps, state.started
            )
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
        self._meta.append(
            openai_batch.meta_line(
                rid, line, ok, result.body, self.cfg.run, state.started, time.time()
            )
        )
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
            if not retry:
                self.stats.calls += 1
                if conn_error is False:
                    self.pool.mark_up(ep)
                return state, result
            if conn_error:
                self.pool.mark_down(ep)
            if time.monotonic() >= deadline:
                self.stats.calls += 1
                return state, CallResult(
                    result.status, None, f"gave up after {attempt} attempts: {result.error}"
                )
            self.stats.retries += 1
            await asyncio.sleep(backoff_delay(attempt))

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
        try:
            async with self._session.post(
                ep.base + path, data=payload, headers=self._headers
            ) as resp:
                raw = await resp.read()
                status = resp.status
                rid = resp.headers.get("x-request-id")
        except (aiohttp.ClientError, OSError) as err:  # refused, reset, bad payload, ...
            return CallResult(0, None, f"connection error: {type(err).__name__}"), True, True
        except TimeoutError:
            return CallResult(0, None, "timed out"), True, None
        finally:
            ep.outstanding -= 1
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        if status == 200 and isinstance(body, dict):
            return CallResult(200, body, None, body.get("id") or rid), False, False
        message = _error_message(body, raw)
        if is_retryable(status):
            return CallResult(status, None, f"HTTP {status}: {message}"), True, None
        return CallResult(status, body, f"HTTP {status}: {message}", rid), False, False


def _content(body: dict[str, Any]) -> str:
    try:
        choice = body["choices"][0]
    except (KeyError, IndexError, TypeError):
        return ""
    msg = choice.get("message") or {}
    return msg.get("content") or choice.get("text") or ""


def _error_message(body: Any, raw: bytes) -> str:
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        return str(err)[:300]
    return raw[:200].decode("utf-8", "replace")


OnTick = Callable[[Stats], None]
