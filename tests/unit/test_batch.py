"""Inputs, endpoint choice, backoff, and the engine's retry/bounds logic.

The engine tests use the fault server (tests/plugins/fault_server.py) only to script failures
a real server will not produce on demand (429, 503, dropped connections); the happy path
against the real vLLM lives in tests/integration/test_batch.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from sparkops.batch.endpoints import EndpointPool, normalise_base
from sparkops.batch.engine import Engine, EngineConfig
from sparkops.batch.job import JobConfig, run_job
from sparkops.batch.records import InputProblem, Record, detect_kind, read_records, scan_input
from sparkops.batch.retry import backoff_delay, is_retryable
from sparkops.batch.workload import Pipeline
from sparkops.errors import UserError
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import RESULTS
from sparkops.jobdir.journal import Journal
from sparkops.pipeline.spec import parse_pipeline
from tests.plugins.fault_server import drop, free_port, status

SPEC = parse_pipeline(
    {
        "name": "t",
        "model": "m",
        "constrain": False,  # the fault server answers free text ("Yes.")
        "steps": [
            {
                "name": "a",
                "system": "S",
                "user": "{text}",
                "parse": {"choices": ["yes", "no"]},
                "next": {"yes": "b", "no": "stop", "unclear": "stop"},
            },
            {"name": "b", "user": "{text}", "parse": {"choices": ["x", "y"]}},
        ],
    }
)


def test_jsonl_reader_reports_bad_lines_with_numbers(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": 1, "text": "a"}\nnot json\n\n{"text": "no id"}\n[1]\n{"id": "x"}\n')
    items = list(read_records(p, "jsonl"))
    assert items[0] == Record("1", 1, {"id": 1, "text": "a"})
    assert [(i.line, type(i).__name__) for i in items] == [
        (1, "Record"),
        (2, "InputProblem"),
        (4, "InputProblem"),
        (5, "InputProblem"),
        (6, "Record"),
    ]
    assert "line 2: not valid JSON" in items[1].message
    assert "line 4: no 'id'" in items[2].message


def test_csv_reader_and_custom_id_field(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text("key,text\nk1,hello\n,empty id\nk3,a,b\n")
    items = list(read_records(p, "csv", "key"))
    assert items[0] == Record("k1", 2, {"key": "k1", "text": "hello"})
    assert isinstance(items[1], InputProblem) and "line 3" in items[1].message
    assert isinstance(items[2], InputProblem) and items[2].id == "k3"
    with pytest.raises(UserError, match="--id-field"):
        list(read_records(p, "csv", "id"))


def test_openai_batch_files_are_detected_and_checked(tmp_path):
    p = tmp_path / "b.jsonl"
    ok = {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": {"x": 1}}
    bad = {**ok, "custom_id": "c2", "url": "/v1/images/generations"}
    emb = {**ok, "custom_id": "c3", "url": "/v1/embeddings"}  # served as vllm run-batch does
    p.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n" + json.dumps(emb) + "\n")
    assert detect_kind(p) == "openai"
    a, b, c = read_records(p, "openai")
    assert c.id == "c3" and c.fields["url"] == "/v1/embeddings"
    assert (
        a.id == "c1"
        and isinstance(b, InputProblem)
        and b.id == "c2"
        and "not supported" in b.message
    )


def test_scan_finds_duplicates_and_fingerprints(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "a"}\n')
    s = scan_input(p, "jsonl", "id")
    assert s.total == 3 and s.duplicates == [("a", 3)]
    p.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c"}\n')
    assert scan_input(p, "jsonl", "id").fingerprint != s.fingerprint


def test_duplicate_ids_refused_before_any_request(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    pipe = tmp_path / "p.yaml"
    pipe.write_text(
        "name: t\nmodel: m\nsteps:\n  - name: a\n    user: '{text}'\n"
        "    parse: {choices: [yes, no]}\n"
    )
    out = tmp_path / "job"
    with pytest.raises(UserError, match=r"duplicate id.*'a' \(line 2\)"):
        run_job(JobConfig(input=p, out=out, endpoints=["http://127.0.0.1:9"], pipeline=pipe))
    assert not out.exists()


def test_least_outstanding_and_dead_endpoints_benched():
    pool = EndpointPool.from_urls(["http://a:1/v1/", "http://b:2"])
    a, b = pool.endpoints
    assert a.base == "http://a:1" and normalise_base("http://b:2/") == "http://b:2"
    a.outstanding = 3
    assert pool.pick(now=0) is b
    b.outstanding = 5
    assert pool.pick(now=0) is a
    pool.mark_down(a, now=0)
    assert pool.pick(now=0.1) is b
    assert pool.pick(now=100) is a


def test_backoff_has_jitter_and_a_cap():
    assert backoff_delay(1, rng=lambda: 1.0) == 0.5
    assert backoff_delay(10, rng=lambda: 1.0) == 20.0
    assert backoff_delay(3, rng=lambda: 0.0) == 0.0
    assert is_retryable(429) and is_retryable(503) and not is_retryable(400)


async def run_engine(tmp_path, urls, records, concurrency=4):
    journal = Journal(tmp_path, "id", fsync_interval=0)
    journal.open()
    pool = EndpointPool.from_urls(urls)
    engine = Engine(
        EngineConfig(concurrency=concurrency, retry_for=30), pool, journal, Pipeline(SPEC)
    )
    stats = await engine.run(iter(records))
    journal.close()
    return stats, {r["id"]: r for r in iter_json_lines(tmp_path / RESULTS)}, pool


def _yes_to_go(key: str, body: dict) -> str:
    return "Yes." if " go " in body["messages"][-1]["content"] else "no"


def test_engine_retries_transient_errors_and_keeps_400_as_record_error(
    tmp_path, monkeypatch, fault_server
):
    monkeypatch.setattr("sparkops.batch.calls.backoff_delay", lambda attempt: 0.01)
    recs = [
        Record(f"r{i}", i, {"text": f"[id:r{i}] go {i}" if i % 2 else f"[id:r{i}] stop {i}"})
        for i in range(1, 41)
    ]
    recs.append(Record("missing", 41, {"other": 1}))
    fault_server.content = _yes_to_go
    fault_server.script("r1", status(429), status(503), drop())
    fault_server.script("r2", status(400))
    fault_server.script("r3", status(500))
    stats, results, _ = asyncio.run(run_engine(tmp_path, [fault_server.url], recs, concurrency=4))
    assert len(results) == 41
    assert results["r1"]["status"] == "done" and [s["step"] for s in results["r1"]["steps"]] == [
        "a",
        "b",
    ]
    assert results["r2"]["status"] == "error" and "HTTP 400" in results["r2"]["error"]
    assert results["r4"]["final"] == "no" and len(results["r4"]["steps"]) == 1
    # The fault server reports half the prompt ("S" + the record text) as cached.
    assert results["r1"]["steps"][0]["cached_tokens"] == len("S\n[id:r1] go 1") // 2
    assert results["missing"]["status"] == "error" and "line 41" in results["missing"]["error"]
    assert stats.retries == 4
    assert fault_server.max_in_flight <= 4
    # 20 "go" records take 2 calls, 20 "stop" 1 call, plus 4 retried attempts
    assert sum(fault_server.requests.values()) == 20 * 2 + 20 + 4


def test_engine_spreads_over_endpoints_and_survives_a_dead_one(tmp_path, monkeypatch, fault_server):
    monkeypatch.setattr("sparkops.batch.calls.backoff_delay", lambda attempt: 0.01)
    recs = [Record(f"r{i}", i, {"text": f"stop {i}"}) for i in range(30)]
    dead = f"http://127.0.0.1:{free_port()}"
    _stats, results, pool = asyncio.run(
        run_engine(tmp_path, [dead, fault_server.url], recs, concurrency=6)
    )
    assert all(r["status"] == "done" for r in results.values()) and len(results) == 30
    assert pool.endpoints[0].sent >= 1 and pool.endpoints[1].sent >= 30
