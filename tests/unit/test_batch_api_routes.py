"""`sparkops batch serve`'s HTTP routes in process: every answer validated against the
`openai` package's types, every refusal in OpenAI's error shape. The runner is not started
here (batches stay queued, except a cancel, which ends a queued batch at once): running
jobs is test_batch_api_runner.py's, the whole server with the real client the integration
tests'."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import FormData
from aiohttp.test_utils import TestClient, TestServer
from openai.types import Batch, FileDeleted, FileObject

from sparkops.batch.api.routes import make_app
from sparkops.batch.api.runner import JobCommand, Runner
from sparkops.batch.api.store import Store
from tests.plugins.fault_server import openai_lines

KEY = "sk-test-0123456789abcdef"


def served(
    tmp_path: Path, test: Callable[[TestClient, Runner], Awaitable[None]], key: str | None = None
) -> None:
    """Run `test` against the app on a fresh root."""

    async def main() -> None:
        store = Store.open(tmp_path / "root")
        runner = Runner(store, JobCommand(("http://127.0.0.1:9",)), tell=lambda _: None)
        runner.load()
        client = TestClient(TestServer(make_app(store, runner, key)))
        await client.start_server()
        try:
            await test(client, runner)
        finally:
            await runner.stop()
            await client.close()
            store.close()

    asyncio.run(main())


def form(content: bytes, purpose: str | None = "batch", name: str = "in.jsonl") -> FormData:
    data = FormData()
    if purpose is not None:
        data.add_field("purpose", purpose)
    data.add_field("file", content, filename=name, content_type="application/octet-stream")
    return data


async def answer(response: Any, status: int = 200) -> dict:
    body = await response.json()
    assert response.status == status, body
    return body


async def refusal(response: Any, status: int, param: str | None = None) -> str:
    """The message of an OpenAI-shaped error answer with `status` (and `param`)."""
    body = await answer(response, status)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    if param is not None:
        assert body["error"]["param"] == param
    return body["error"]["message"]


def batch_file(tmp_path: Path, n: int = 3) -> bytes:
    path = tmp_path / "upload.jsonl"
    openai_lines(path, n)
    return path.read_bytes()


def test_a_file_is_uploaded_read_and_deleted(tmp_path):
    content = batch_file(tmp_path)

    async def test(client: TestClient, runner: Runner) -> None:
        uploaded = FileObject.model_validate(
            await answer(await client.post("/v1/files", data=form(content)))
        )
        assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (
            len(content),
            "in.jsonl",
            "batch",
        )
        again = await answer(await client.get(f"/v1/files/{uploaded.id}"))
        assert FileObject.model_validate(again) == uploaded
        got = await client.get(f"/v1/files/{uploaded.id}/content")
        assert got.status == 200 and await got.read() == content
        gone = await answer(await client.delete(f"/v1/files/{uploaded.id}"))
        assert FileDeleted.model_validate(gone).deleted
        message = await refusal(await client.get(f"/v1/files/{uploaded.id}"), 404, "id")
        assert message == f"No such File object: {uploaded.id}"
        await refusal(await client.delete(f"/v1/files/{uploaded.id}"), 404)
        await refusal(await client.get(f"/v1/files/{uploaded.id}/content"), 404)

    served(tmp_path, test)


def test_an_upload_is_refused_without_batch_purpose_or_a_file(tmp_path):
    async def test(client: TestClient, runner: Runner) -> None:
        message = await refusal(
            await client.post("/v1/files", data=form(b"{}", "fine-tune")), 400, "purpose"
        )
        assert "'fine-tune'" in message and "purpose='batch'" in message
        await refusal(await client.post("/v1/files", data=form(b"{}", None)), 400, "purpose")
        only_purpose = FormData()
        only_purpose.add_field("purpose", "batch")
        only_purpose.add_field("x", b"", filename="x")  # a file part, so it stays multipart
        message = await refusal(await client.post("/v1/files", data=only_purpose), 400, "x")
        assert "Unrecognized request argument" in message
        message = await refusal(await client.post("/v1/files", json={"purpose": "batch"}), 400)
        assert "multipart/form-data" in message
        assert list((tmp_path / "root" / "files").iterdir()) == []  # nothing kept, no temp

    served(tmp_path, test)


async def create(client: TestClient, file_id: str, **extra: Any) -> Any:
    body = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        **extra,
    }
    return await client.post("/v1/batches", json=body)


async def upload(client: TestClient, content: bytes) -> str:
    return (await answer(await client.post("/v1/files", data=form(content))))["id"]


def test_a_batch_is_created_listed_and_read(tmp_path):
    content = batch_file(tmp_path, 4)

    async def test(client: TestClient, runner: Runner) -> None:
        file_id = await upload(client, content)
        made = []
        for n in range(3):
            made.append(
                Batch.model_validate(
                    await answer(await create(client, file_id, metadata={"n": str(n)}))
                )
            )
        first = made[0]
        assert (first.status, first.in_progress_at, first.model) == ("in_progress", None, "tiny")
        assert first.request_counts.total == 4 and first.input_file_id == file_id
        on_disk = json.loads((tmp_path / "root/batches" / first.id / "batch.json").read_text())
        assert on_disk["status"] == "in_progress" and on_disk["metadata"] == {"n": "0"}
        got = Batch.model_validate(await answer(await client.get(f"/v1/batches/{first.id}")))
        assert got == first
        page = await answer(await client.get("/v1/batches", params={"limit": "2"}))
        assert [b["id"] for b in page["data"]] == [made[2].id, made[1].id]  # newest first
        assert page["has_more"] is True and page["last_id"] == made[1].id
        rest = await answer(
            await client.get("/v1/batches", params={"limit": "2", "after": made[1].id})
        )
        assert [b["id"] for b in rest["data"]] == [first.id] and rest["has_more"] is False
        await refusal(await client.get("/v1/batches", params={"limit": "0"}), 400, "limit")
        message = await refusal(await client.get("/v1/batches/batch_nothere"), 404, "id")
        assert message == "No such Batch object: batch_nothere"

    served(tmp_path, test)


def test_a_bad_create_leaves_no_batch_behind(tmp_path):
    duplicated = batch_file(tmp_path, 2) * 2

    async def test(client: TestClient, runner: Runner) -> None:
        message = await refusal(await create(client, "file-nothere"), 400, "input_file_id")
        assert "'file-nothere' names no file here" in message
        file_id = await upload(client, duplicated)
        message = await refusal(await create(client, file_id), 400, "input_file_id")
        assert "duplicate" in message and f"file {file_id}" in message
        message = await refusal(await create(client, file_id, completion_window="1h"), 400)
        assert "'24h'" in message
        bad_json = await client.post(
            "/v1/batches", data=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert "JSON body" in await refusal(bad_json, 400)
        assert list((tmp_path / "root" / "batches").iterdir()) == []
        assert (await answer(await client.get("/v1/batches")))["data"] == []

    served(tmp_path, test)


def test_a_queued_batch_is_cancelled_at_once_and_only_once(tmp_path):
    content = batch_file(tmp_path)

    async def test(client: TestClient, runner: Runner) -> None:
        batch_id = (await answer(await create(client, await upload(client, content))))["id"]
        cancelling = Batch.model_validate(
            await answer(await client.post(f"/v1/batches/{batch_id}/cancel"))
        )
        assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
        for _ in range(200):  # a bound on a hang: the cancel ends a queued batch at once
            got = Batch.model_validate(await answer(await client.get(f"/v1/batches/{batch_id}")))
            if got.status == "cancelled":
                break
            await asyncio.sleep(0.05)
        assert got.status == "cancelled" and got.cancelled_at is not None
        assert got.output_file_id is None and got.request_counts.completed == 0
        message = await refusal(await client.post(f"/v1/batches/{batch_id}/cancel"), 400)
        assert "is cancelled; only a batch that is validating or in_progress" in message

    served(tmp_path, test)


def test_with_a_key_every_request_must_carry_it(tmp_path):
    async def test(client: TestClient, runner: Runner) -> None:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            response = await client.get("/v1/batches", headers=headers)
            body = await response.json()
            assert response.status == 401 and body["error"]["code"] == "invalid_api_key"
            assert KEY not in json.dumps(body)
        ok = await client.get("/v1/batches", headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status == 200

    served(tmp_path, test, key=KEY)


def test_an_unknown_route_answers_in_openai_shape(tmp_path):
    async def test(client: TestClient, runner: Runner) -> None:
        message = await refusal(await client.get("/v1/models"), 404)
        assert message == "Invalid URL (GET /v1/models)"
        await refusal(await client.put("/v1/batches"), 405)

    served(tmp_path, test)
