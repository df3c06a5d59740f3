"""The client wired at construction (issue 38 item 3): one server client, one run's hooks.

- `ServerClient` (sparkops/openai_http.py) carries the session, the auth headers and the
  checks' timeout: every request a job makes, on the side client and the engine's, carries the
  key (a proxy in front of the fault server records each request's Authorization header).
- `Stopper` / `JobSignals` (batch/hooks.py, batch/signals.py): a signal before the run cancels
  the job's task, during it stops the run, after it changes nothing.
- The pool notes stall changes through the run's hooks; the progress line learns which
  endpoints are stalled from those notes alone.
- No module of the client sets a collaborator or an outlet on another object after it was
  built: an AST scan of src/sparkops/batch allows only the plain records' own fields.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.fate import Stats
from sparkops.batch.hooks import RunHooks, Stop, Stopper
from sparkops.batch.job import JobConfig, run_job
from sparkops.batch.progress import ProgressView
from sparkops.batch.signals import JobSignals
from sparkops.batch.stall import StallChange
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import RESULTS
from sparkops.openai_http import AnswerError, NoAnswer, ServerClient, auth_headers
from tests.plugins.fault_server import free_port, held_or_free
from tests.plugins.rewriting_proxy import RewritingProxy

SRC = Path(__file__).resolve().parents[2] / "src" / "sparkops"
KEY = "sk-wired-38"


# ---- the server client -------------------------------------------------------------------
class KeyRecorder(RewritingProxy):
    """Forwards every request as the rewriting proxy does, recording its route and key."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.seen: list[tuple[str, str, str | None]] = []

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path, request.headers.get("Authorization")))
        return await super()._forward(request)


@pytest.fixture
def recorder(fault_server) -> Iterator[KeyRecorder]:
    proxy = KeyRecorder(fault_server.url).start()
    try:
        yield proxy
    finally:
        proxy.close()


def test_every_request_of_a_job_carries_its_key(tmp_path, monkeypatch, fault_server, recorder):
    """Pre-flight (/v1/models, the check request, the constraint probe, /tokenize, /metrics),
    the serving record (/version), the samples and the records' own calls: one key on all."""
    fault_server.content = held_or_free("I think so.")
    monkeypatch.setenv("WIRED_KEY", KEY)
    records = tmp_path / "in.jsonl"
    records.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": f"t{i}"}) + "\n" for i in range(6))
    )
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "name: t\nmodel: tiny\nsteps:\n  - name: a\n    user: '{text}'\n"
        "    parse: {choices: [yes, no]}\n"
    )
    cfg = JobConfig(
        input=records,
        out=tmp_path / "job",
        endpoints=[recorder.url],
        pipeline=pipeline,
        api_key_env="WIRED_KEY",
        progress=False,
    )
    summary = run_job(cfg)
    assert summary.exit_status == 0 and summary.job_done == 6
    finals = {line["id"]: line["final"] for line in iter_json_lines(cfg.out / RESULTS)}
    assert finals == {f"r{i}": "yes" for i in range(6)}  # held: the first allowed choice
    routes = {(method, path) for method, path, _ in recorder.seen}
    assert {
        ("GET", "/v1/models"),
        ("GET", "/version"),
        ("GET", "/metrics"),
        ("POST", "/tokenize"),
        ("POST", "/v1/chat/completions"),
    } <= routes
    keys = {auth for _, _, auth in recorder.seen}
    assert keys == {f"Bearer {KEY}"}, [s for s in recorder.seen if s[2] != f"Bearer {KEY}"]


async def _serve(routes: Callable[[web.Application], None]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def test_the_server_client_reads_answers_and_refuses_what_is_not_one():
    """A 5xx is no answer, a 4xx is one; a model list or a token list of another shape is an
    AnswerError naming the shape, never the content; without a key no header is sent."""
    seen: list[str | None] = []

    def routes(app: web.Application) -> None:
        async def version(request: web.Request) -> web.Response:
            seen.append(request.headers.get("Authorization"))
            return web.Response(status=503, text="busy")

        async def models(request: web.Request) -> web.Response:
            seen.append(request.headers.get("Authorization"))
            return web.json_response({"data": "secret record text"})

        async def tokenize(request: web.Request) -> web.Response:
            seen.append(request.headers.get("Authorization"))
            return web.json_response({"tokens": [1, True]})

        app.router.add_get("/version", version)
        app.router.add_get("/v1/models", models)

        async def gone(request: web.Request) -> web.Response:
            return web.Response(status=404, text="no")

        app.router.add_get("/gone", gone)
        app.router.add_post("/tokenize", tokenize)

    async def main() -> None:
        runner, base = await _serve(routes)
        try:
            async with aiohttp.ClientSession() as session:
                client = ServerClient(session, auth_headers(None))
                with pytest.raises(NoAnswer, match="HTTP 503"):
                    await client.get_raw(base + "/version")
                assert await client.get_raw(base + "/gone") == (404, "no")
                assert await client.get_text(base + "/gone") is None
                with pytest.raises(AnswerError) as err:
                    await client.served_models(base)
                assert "keys [data]" in str(err.value) and "secret" not in str(err.value)
                with pytest.raises(AnswerError, match=re.escape("not {'tokens'")):
                    await client.tokenize(base, "m", [{"role": "user", "content": "x"}])
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert seen == [None, None, None]
    assert auth_headers("") == {} and auth_headers("k") == {"Authorization": "Bearer k"}


# ---- the run's stop and the signals ------------------------------------------------------
def test_a_stop_is_refused_before_the_run_taken_once_during_it_and_ignored_after():
    stopper = Stopper()
    woken: list[int] = []
    first, second = Stop("fail-fast", "first"), Stop("no-answer", "second")
    assert stopper.stop(first) is False and stopper.reason is None
    with stopper.running(lambda: woken.append(1)):
        assert stopper.stop(first) is True and stopper.stop(second) is True
    assert stopper.reason is first and woken == [1, 1]  # every stop wakes the dispatcher
    assert stopper.stop(Stop("signal", "SIGINT", 2)) is True
    assert stopper.reason is first and woken == [1, 1]


def test_a_signal_before_the_run_cancels_the_job_and_during_it_stops_the_run():
    async def before() -> int | None:
        with JobSignals(Stopper()) as signals:
            os.kill(os.getpid(), signal.SIGTERM)
            with pytest.raises(asyncio.CancelledError):
                await asyncio.sleep(60)
            return signals.signum

    assert asyncio.run(before()) == signal.SIGTERM

    async def during() -> tuple[Stop | None, int | None]:
        stopper = Stopper()
        woken = asyncio.Event()
        with JobSignals(stopper) as signals, stopper.running(woken.set):
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.wait_for(woken.wait(), 60)  # not cancelled: the run winds down
        return stopper.reason, signals.signum

    reason, signum = asyncio.run(during())
    assert reason == Stop("signal", "SIGINT", signal.SIGINT) and signum == signal.SIGINT


# ---- stall changes reach the job through the hooks ---------------------------------------
def test_the_pool_notes_stall_changes_and_the_progress_line_lists_them_in_job_order():
    view = ProgressView(Stats(), 10, 0, enabled=False, endpoints=["http://a:1", "http://b:2"])
    noted: list[StallChange] = []

    def note(change: StallChange) -> None:
        noted.append(change)
        view.note(change)

    pool = EndpointPool.from_urls(["http://a:1", "http://b:2"], 10, hooks=RunHooks(note=note))
    for ep in reversed(pool.endpoints):  # b stalls first, a then: listed a, b all the same
        assert ep.watch is not None
        ep.watch.sent(0.0)
        pool.check(10.0 if ep.base.endswith(":2") else 11.0)
    assert [c.kind for c in noted] == ["stalled", "stalled"]
    assert view.stalled_names() == ["http://a:1", "http://b:2"]
    assert "stalled: http://a:1, http://b:2" in view.status_text()
    b = pool.endpoints[1]
    assert b.watch is not None
    b.watch.ended(12.0, answered=True, seconds=1.0)
    pool.check(12.0)
    assert noted[-1].kind == "rejoined" and view.stalled_names() == ["http://a:1"]


# ---- nothing wired after construction ----------------------------------------------------
# What the client's modules may set on an object other than `self`: the fields of plain
# records that several parts update by design (the live counters, a record's state, an
# endpoint's bookkeeping, the stall watch's per-endpoint state, a log being loaded). A
# collaborator or an outlet is never among them: those are constructor arguments.
RECORD_FIELDS = {
    "stats.calls",
    "stats.retries",
    "stats.in_flight",
    "stats.hit_rate",
    "self.stats.skipped",
    "self.stats.done",
    "self.stats.errors",
    "state.step",
    "state.ready_seq",
    "ep.failures",
    "ep.down_until",
    "ep.outstanding",
    "ep.sent",
    "e.watch.probe_started",
    "w.stalled_since",
    "w.probe_at",
    "w.probe_started",
    "w.failed_probes",
    "w._rejoin",
    "w.last_progress",
    "self._owner.slowest",
    "log.epoch",
    "parse.__name__",
}


def set_elsewhere(source: str) -> list[str]:
    """Each attribute assignment in `source` whose object is not `self` itself."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in getattr(target, "elts", [target])]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Attribute) and not (
                isinstance(target.value, ast.Name) and target.value.id == "self"
            ):
                found.append(ast.unparse(target))
    return found


def test_no_part_of_the_client_is_wired_after_construction():
    wired = {
        f"{path.name}: {target}"
        for path in sorted((SRC / "batch").glob("*.py"))
        for target in set_elsewhere(path.read_text(encoding="utf-8"))
        if target not in RECORD_FIELDS
    }
    assert wired == set()


def test_the_scan_finds_the_wiring_it_forbids():
    """The scan is not blind: the assignments the job made before issue 38 are all found."""
    before = (
        "self.checks.transport = transport\n"
        "engine.fates.truncation.on_warning = view.say\n"
        "engine.pool.on_change = on_stall_change\n"
        "signals.engine = engine\n"
        "self._engine, engine.serving = engine, 3\n"
        "self.pool.suspended += 1.0\n"
    )
    found = [t for t in set_elsewhere(before) if t not in RECORD_FIELDS]
    assert found == [
        "self.checks.transport",
        "engine.fates.truncation.on_warning",
        "engine.pool.on_change",
        "signals.engine",
        "engine.serving",
        "self.pool.suspended",
    ]
