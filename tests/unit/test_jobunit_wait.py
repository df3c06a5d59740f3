"""`sparkops batch wait-ready` (sparkops.jobunit.wait), the job unit's wait for serving, against
a real aiohttp server on loopback: it waits while the server loads or fails, never on a wrong
key (the client names that), and gives up after its bound."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sparkops.jobunit.wait import judge_answer, judge_models, wait_ready
from tests.plugins.cli import sparkops
from tests.plugins.fault_server import free_port

MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model"}]}
ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}]}


def test_what_counts_as_an_answer() -> None:
    assert judge_models(200, MODELS) == (None, "tiny")
    assert judge_models(200, {"data": []})[0].ready is False
    assert judge_models(503, None)[0].ready is False
    assert judge_models(401, None)[0].ready is True  # up; the client's check names the key
    assert judge_answer(200, ANSWER, "tiny").ready is True
    assert judge_answer(200, {"choices": []}, "tiny").ready is False
    assert judge_answer(500, None, "tiny").ready is False
    assert judge_answer(429, None, "tiny").ready is False
    assert judge_answer(404, None, "tiny").ready is True


async def _serve(statuses: list[int], seen: list[dict]) -> tuple[web.AppRunner, str]:
    """/v1/models answers; each chat completion takes the next status (then 200)."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response(MODELS)

    async def chat(request: web.Request) -> web.Response:
        seen.append({"body": await request.json(), "auth": request.headers.get("Authorization")})
        code = statuses.pop(0) if statuses else 200
        return web.json_response(ANSWER if code == 200 else {"error": {}}, status=code)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def test_it_waits_through_failures_until_a_real_answer_and_says_so() -> None:
    said: list[str] = []
    seen: list[dict] = []

    async def scenario() -> bool:
        runner, url = await _serve([503, 500, 503], seen)
        try:
            return await wait_ready([url], {"Authorization": "Bearer k"}, 60, 0.01, said.append)
        finally:
            await runner.cleanup()

    assert asyncio.run(scenario()) is True
    assert len(seen) == 4 and all(s["auth"] == "Bearer k" for s in seen)
    assert seen[0]["body"]["max_tokens"] == 1 and seen[0]["body"]["model"] == "tiny"
    assert said[0].startswith("waiting for http://127.0.0.1:")
    assert "a chat completion answered HTTP 503" in said[0]
    assert "a chat completion answered HTTP 500" in said[1]  # said again: the reason changed
    assert said[-1].endswith("tiny answered a chat completion; ready")


def test_it_gives_up_after_its_bound_and_the_command_exits_1() -> None:
    said: list[str] = []
    port = free_port()  # nothing listens there
    ready = asyncio.run(wait_ready([f"http://127.0.0.1:{port}"], {}, 0.05, 0.01, said.append))
    assert ready is False
    assert "cannot connect (ClientConnectorError" in said[0]
    assert said[-1].endswith("the unit's restart policy tries again")
    assert "did not answer a chat completion within 0 s" in said[-1]
    run = sparkops("batch", "wait-ready", f"--endpoint=http://127.0.0.1:{port}?token=secret1",
                   "--within", "0.05", "--interval", "0.01", limit=60)  # fmt: skip
    assert run.returncode == 1
    assert "did not answer a chat completion" in run.stderr and "secret1" not in run.stderr
    missing = sparkops("batch", "wait-ready", f"--endpoint=http://127.0.0.1:{port}",
                       "--api-key-env", "NO_SUCH_KEY_VAR", limit=60)  # fmt: skip
    assert missing.returncode == 2
    assert "--api-key-env NO_SUCH_KEY_VAR: that variable is not set or empty" in missing.stderr
