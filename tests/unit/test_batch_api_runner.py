"""The batch server's queue (runner.py) with stand-in jobs: how each way a job ends becomes a
batch's status and files, cancel, stop and resume, one batch at a time, and the waits before
a job starts. The stand-in is a real child process that writes results lines as a job does
and ends as told (an exit status, a line on stderr, or waiting for SIGTERM); the real
`sparkops batch run` is the integration tests' (tests/integration/test_batch_api.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sparkops.batch.api import runner as runner_module
from sparkops.batch.api.objects import BatchState
from sparkops.batch.api.runner import JobCommand, Runner
from sparkops.batch.api.store import Store
from sparkops.jobdir.openai_lines import output_line

JOB = """\
import json, os, signal, sys, time
out, plan = sys.argv[1], json.loads(sys.argv[2])
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "results.jsonl"), "a") as fh:
    for line in plan.get("lines", []):
        fh.write(json.dumps(line) + "\\n")
for said in plan.get("say", []):
    print(said, file=sys.stderr)
if plan.get("wait"):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    open(os.path.join(out, "waiting"), "w").close()
    while True:
        time.sleep(0.05)
sys.exit(plan.get("exit", 0))
"""
CHAT = {"id": "c", "object": "chat.completion", "choices": [], "model": "tiny"}


def ok(rid: str) -> dict:
    return output_line(rid, 1, 200, CHAT, None, f"req-{rid}")


def bad(rid: str) -> dict:
    body = {"error": {"message": "too long", "type": "BadRequestError"}}
    return output_line(rid, 2, 400, body, "HTTP 400: too long", f"req-{rid}", "http_status")


@dataclass(frozen=True)
class StandIn(JobCommand):
    """Each job run takes the next plan: results lines, stderr lines, then an exit status."""

    plans: list[dict] = field(default_factory=list)

    def argv(self, input_path: Path, out: Path) -> list[str]:
        return [sys.executable, "-c", JOB, str(out), json.dumps(self.plans.pop(0))]


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(runner_module, "RETRY_S", 0.2)
    monkeypatch.setattr(runner_module, "POLL_S", 0.05)
    monkeypatch.setattr(runner_module, "ENDPOINT_POLL_S", 0.05)


class Scene:
    """A root, an endpoint answering /v1/models as told, and a runner over them."""

    def __init__(self, tmp_path: Path, plans: list[dict]) -> None:
        self.tmp_path = tmp_path
        self.plans = plans
        self.models_answers: list[int] = []  # statuses for the next /v1/models calls, then 200
        self.said: list[str] = []
        self.store: Store | None = None
        self.runner: Runner | None = None

    async def models(self, request: web.Request) -> web.Response:
        status = self.models_answers.pop(0) if self.models_answers else 200
        return web.json_response({"data": []}, status=status)

    def start_runner(self, url: str) -> Runner:
        self.store = Store.open(self.tmp_path / "root")
        command = StandIn((url,), plans=self.plans)
        self.runner = Runner(self.store, command, tell=self.said.append)
        self.runner.load()
        self.runner.start()
        return self.runner

    async def stop_runner(self) -> None:
        assert self.runner is not None and self.store is not None
        await self.runner.stop()
        self.store.close()

    def new_batch(self, total: int = 2) -> BatchState:
        assert self.store is not None and self.runner is not None
        temp = self.store.temp_path()
        temp.write_text('{"custom_id": "r1", "url": "/v1/chat/completions", "body": {}}\n')
        stored = self.store.publish(temp, f"file-{time.time_ns()}", "in.jsonl", "batch")
        state = BatchState(
            id=f"batch_{time.time_ns()}",
            endpoint="/v1/chat/completions",
            input_file_id=stored.id,
            completion_window="24h",
            created_ns=time.time_ns(),
            status="in_progress",
            total=total,
        )
        self.store.begin_batch(state.id, stored.id)
        self.runner.add(state)
        return state

    def lines_of(self, file_id: str | None) -> list[str]:
        assert self.store is not None
        if file_id is None:
            return []
        text = self.store.data_path(file_id).read_text()
        return [json.loads(x)["custom_id"] for x in text.splitlines()]


async def until(check: Callable[[], Any], what: str, limit: float = 60.0) -> None:
    """Wait until `check()` holds (a bound on a hang, not a timing)."""
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def play(tmp_path: Path, plans: list[dict], story: Callable[[Scene], Awaitable[None]]) -> Scene:
    scene = Scene(tmp_path, plans)

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/v1/models", scene.models)
        server = TestServer(app)
        await server.start_server()
        scene.url = str(server.make_url("")).rstrip("/")
        scene.start_runner(scene.url)
        try:
            await story(scene)
        finally:
            await scene.stop_runner()
            await server.close()

    asyncio.run(main())
    return scene


def ended(state: BatchState) -> Callable[[], bool]:
    return lambda: state.terminal


def on_disk(scene: Scene, state: BatchState) -> dict:
    assert scene.store is not None
    return json.loads((scene.store.batch_dir(state.id) / "batch.json").read_text())


def test_a_finished_job_completes_the_batch_with_its_two_files(tmp_path):
    async def story(scene: Scene) -> None:
        state = scene.new_batch(total=3)
        await until(ended(state), "the batch to end")
        assert state.status == "completed" and state.finalizing_at and state.completed_at
        assert (state.completed, state.failed) == (2, 1)
        assert scene.lines_of(state.output_file_id) == ["r1", "r3"]
        assert scene.lines_of(state.error_file_id) == ["r2"]
        assert on_disk(scene, state)["status"] == "completed"
        assert scene.store.file(state.output_file_id).purpose == "batch_output"
        assert any("completed, 2 succeeded, 1 failed" in x for x in scene.said)

    play(tmp_path, [{"lines": [ok("r1"), bad("r2"), ok("r3")], "exit": 3}], story)


@pytest.mark.parametrize(
    ("status", "said", "code", "message"),
    [
        (1, ["sparkops: error: stopped: no endpoint answered for 1800 s"], "job_stopped",
         "stopped: no endpoint answered for 1800 s"),
        (2, ["sparkops: warning: x", "sparkops: error: model 'big' is not served"],
         "job_refused", "model 'big' is not served"),
        (70, [], "job_failed", "sparkops batch run ended with exit status 70"),
    ],
)  # fmt: skip
def test_a_job_that_ends_early_fails_the_batch_in_its_words(tmp_path, status, said, code, message):
    async def story(scene: Scene) -> None:
        state = scene.new_batch()
        await until(ended(state), "the batch to end")
        assert state.status == "failed" and state.failed_at
        (error,) = state.errors
        assert error.code == code and error.message.startswith(message)
        assert "its job folder is" in error.message
        assert scene.lines_of(state.output_file_id) == ["r1"]  # what finished is kept
        assert state.error_file_id is None  # no line, no file

    play(tmp_path, [{"lines": [ok("r1")], "say": said, "exit": status}], story)


def test_cancel_stops_the_running_job_and_keeps_its_lines(tmp_path):
    async def story(scene: Scene) -> None:
        state = scene.new_batch()
        job = scene.store.job_dir(state.id)
        await until((job / "waiting").exists, "the job to run")
        assert state.in_progress_at is not None
        scene.runner.cancel(state)
        assert state.status == "cancelling" and on_disk(scene, state)["status"] == "cancelling"
        await until(ended(state), "the batch to end")
        assert state.status == "cancelled" and state.cancelled_at
        assert scene.lines_of(state.output_file_id) == ["r1"]
        assert (state.completed, state.failed) == (1, 0)

    play(tmp_path, [{"lines": [ok("r1")], "wait": True}], story)


def test_batches_run_one_at_a_time_oldest_first(tmp_path):
    async def story(scene: Scene) -> None:
        first, second = scene.new_batch(), scene.new_batch()
        await until((scene.store.job_dir(first.id) / "waiting").exists, "the first job")
        assert second.in_progress_at is None and not scene.store.job_dir(second.id).exists()
        scene.runner.cancel(first)
        await until(ended(second), "the second batch to end")
        assert (first.status, second.status) == ("cancelled", "completed")
        assert scene.lines_of(second.output_file_id) == ["r2"]

    play(tmp_path, [{"lines": [ok("r1")], "wait": True}, {"lines": [ok("r2")]}], story)


def test_a_stopping_server_leaves_its_batch_to_the_next_start(tmp_path):
    plans = [{"lines": [ok("r1")], "wait": True}, {"lines": [ok("r2")]}]

    async def story(scene: Scene) -> None:
        state = scene.new_batch()
        await until((scene.store.job_dir(state.id) / "waiting").exists, "the job to run")
        await scene.stop_runner()
        assert any("stopped with the server; it resumes" in x for x in scene.said)
        assert on_disk(scene, state)["status"] == "in_progress"
        resumed = scene.start_runner(scene.url)  # a new server on the same root
        state = resumed.batches[state.id]
        await until(ended(state), "the resumed batch to end")
        assert state.status == "completed" and scene.lines_of(state.output_file_id) == [
            "r1",
            "r2",
        ]

    play(tmp_path, plans, story)


def test_an_interrupt_from_outside_is_resumed(tmp_path):
    async def story(scene: Scene) -> None:
        state = scene.new_batch()
        await until(ended(state), "the batch to end")
        assert state.status == "completed" and state.errors is None
        assert any("interrupted from outside (exit status 143)" in x for x in scene.said)

    play(tmp_path, [{"lines": [ok("r1")], "exit": 143}, {"lines": [ok("r2")]}], story)


def test_a_cancel_while_an_interrupted_job_waits_ends_it(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_module, "RETRY_S", 600.0)  # the cancel must not wait for it

    async def story(scene: Scene) -> None:
        state = scene.new_batch()
        await until(lambda: any("interrupted from outside" in x for x in scene.said), "it")
        scene.runner.cancel(state)
        await until(ended(state), "the batch to end", limit=30.0)
        assert state.status == "cancelled" and scene.lines_of(state.output_file_id) == ["r1"]

    play(tmp_path, [{"lines": [ok("r1")], "exit": 143}], story)


def test_a_job_waits_for_its_endpoint_to_answer(tmp_path):
    async def story(scene: Scene) -> None:
        scene.models_answers[:] = [503, 503]
        state = scene.new_batch()
        await until(ended(state), "the batch to end")
        assert state.status == "completed" and scene.models_answers == []
        assert any("waiting for http://" in x and "/v1/models" in x for x in scene.said)

    play(tmp_path, [{"lines": [ok("r1")]}], story)


HOLD = """\
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_a_job_waits_until_its_folder_is_free(tmp_path):
    async def story(scene: Scene) -> None:
        assert scene.store is not None and scene.runner is not None
        await scene.runner.stop()  # hold the worker while the folder is made busy
        state = scene.new_batch()
        job = scene.store.job_dir(state.id)
        job.mkdir()
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(job / "lock")], stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline() == "held\n"
            scene.store.close()
            scene.start_runner(scene.url)
            state = scene.runner.batches[state.id]
            await until(lambda: any(f"pid {holder.pid}" in x for x in scene.said), "the wait")
            assert not (job / "results.jsonl").exists()
        finally:
            holder.kill()
            holder.wait()
        await until(ended(state), "the batch to end")
        assert state.status == "completed"

    play(tmp_path, [{"lines": [ok("r1")]}], story)


def test_an_unfinished_cancel_or_finish_is_completed_on_start(tmp_path):
    async def story(scene: Scene) -> None:
        assert scene.store is not None and scene.runner is not None
        await scene.runner.stop()
        cancelling, finalizing = scene.new_batch(), scene.new_batch()
        for state, rid in ((cancelling, "r1"), (finalizing, "r2")):
            job = scene.store.job_dir(state.id)
            job.mkdir()
            (job / "results.jsonl").write_text(json.dumps(ok(rid)) + "\n")
        scene.store.save_batch(cancelling.model_copy(update={"status": "cancelling"}))
        scene.store.save_batch(finalizing.model_copy(update={"status": "finalizing"}))
        scene.store.close()
        runner = scene.start_runner(scene.url)  # the server starts again
        cancelling, finalizing = runner.batches[cancelling.id], runner.batches[finalizing.id]
        await until(lambda: cancelling.terminal and finalizing.terminal, "both to end")
        assert (cancelling.status, finalizing.status) == ("cancelled", "completed")
        assert scene.lines_of(cancelling.output_file_id) == ["r1"]
        assert scene.lines_of(finalizing.output_file_id) == ["r2"]

    play(tmp_path, [], story)
