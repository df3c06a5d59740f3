"""Job folders written before the typed line records still read the same, and the writers
still write the same bytes.

tests/fixtures/jobdirs/{pipeline,openai}/ were written by the kit's own writers (Fates,
ServingLog, the sampler's and the job's run lines, stall.log_event) at aef35b7, before the
line kinds became typed records, by `write_job` below with its clock and uuid pinned; a few
damaged lines (a JSON array, a sample without a time, a garbled serving line, a torn results
tail) were appended by hand after. `*.expected.json` holds what `report`, `batch status`,
`compare`, `bench` and the serving log read from them at that commit, with one reading changed
since: the KV-cache bottleneck's sentence (issue 30: preemptions first, no "above ~70%" rule).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from sparkops.batch import serving, stall
from sparkops.batch.fate import Fates, RecordState, Stats
from sparkops.batch.hooks import RunHooks
from sparkops.batch.outcome import Answer, Failure, Kind, http_failure, record_failure
from sparkops.batch.records import Record
from sparkops.bench.sweep import summarise_level
from sparkops.compare.serving import load_setup
from sparkops.jobdir import lines
from sparkops.jobdir.durable import append_json, write_json_atomic
from sparkops.jobdir.folder import RUNS, TIMELINE, Manifest, prepare_dir
from sparkops.jobdir.identity import build_identity
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.status import job_status
from sparkops.report.compute import compute_report, load_dir

FIXTURES = Path(__file__).parent.parent / "fixtures" / "jobdirs"
KINDS = ("pipeline", "openai")
EP, EP2 = "http://127.0.0.1:8000", "http://127.0.0.1:8001"
T0 = 1_790_000_000.0


def _normal(obj: Any) -> Any:
    """JSON's view of a value (tuples become lists), as the expected files hold it."""
    return json.loads(json.dumps(obj, sort_keys=True))


def read_all(directory: Path) -> dict[str, Any]:
    """Everything the commands read from a job folder, in the expected files' shape."""
    log = serving.ServingLog.load(directory)
    level = summarise_level(
        8,
        list(lines.finished(directory / "results.jsonl")),
        list(lines.timeline_samples(directory / "timeline.jsonl")),
    )
    setup = load_setup(directory)
    assert setup is not None
    return _normal(
        {
            "report": compute_report(load_dir(directory)).to_json(),
            "status": job_status(directory).as_dict(),
            "setup": dataclasses.asdict(setup),
            "serving_log": {"baseline": log.baseline, "last": log.last, "epoch": log.epoch},
            "level": level.as_dict(),
        }
    )


# The report's host section of a folder from before host.jsonl: only the restarts its
# /metrics counters show (report/host.py).
NO_HOST_READINGS = {
    "host": None,
    "readings": 0,
    **dict.fromkeys(
        ("mem_available_min", "mem_free_min", "high_order_free_first", "high_order_free_min"),
        None,
    ),
    **dict.fromkeys(("high_order_free_last", "disk_free_min", "disk_free_last"), None),
    "nvrm": None,
    "container_restarts": None,
    "server_restarts": {"http://127.0.0.1:8000": 1, "http://127.0.0.1:8001": 1},
    "unknown": {},
    "rows": [],
}

# Figures added to what the commands read since the expected files were written: the old
# figures must read as they did; each new one is compared on its own, with what it reads from
# the fixture (the OpenAI lines carry no finish time, so a sweep level of them has no window).
ADDED = {
    "pipeline": {
        "report": {
            "steady_samples": 5,
            "truncated_answers": {},
            "results_damaged_lines": 0,
            "results_repeated_lines": 0,
            "results_lines_note": None,
            "usage_impossible_answers": 0,
            "usage_impossible_note": None,
            "other_model_answers": [],
            # no host.jsonl then; the counters of both endpoints went back between the runs
            "host": NO_HOST_READINGS,
        },
        "status": {
            "truncated": 0,
            "damaged_lines": 0,
            "repeated_lines": 0,
            "other_model_answers": [],
            "unheld_answers": {},
        },
        "level": {"steady_samples": 5, "steady_s": 1024.0},
    },
    "openai": {
        "report": {
            "steady_samples": 5,
            "truncated_answers": {},
            "results_damaged_lines": 0,
            "results_repeated_lines": 0,
            "results_lines_note": None,
            "usage_impossible_answers": 0,
            "usage_impossible_note": None,
            "other_model_answers": [],
            # no host.jsonl then; the counters of both endpoints went back between the runs
            "host": NO_HOST_READINGS,
        },
        "status": {
            "truncated": 0,
            "damaged_lines": 0,
            "repeated_lines": 0,
            "other_model_answers": [],
            "unheld_answers": {},
        },
        "level": {"steady_samples": None, "steady_s": None},
    },
}


@pytest.mark.parametrize("kind", KINDS)
def test_an_old_job_folder_reads_as_it_did(kind, tmp_path):
    directory = tmp_path / kind
    shutil.copytree(FIXTURES / kind, directory)
    expected = json.loads((FIXTURES / f"{kind}.expected.json").read_text())
    got = read_all(directory)
    added = {part: {name: got[part].pop(name) for name in new} for part, new in ADDED[kind].items()}
    assert got == expected
    assert added == ADDED[kind]


class _Clock:
    def __init__(self) -> None:
        self.now = T0
        self.n = 0

    def time(self) -> float:
        return self.now

    def uuid4(self) -> Any:
        self.n += 1
        return mock.Mock(hex=f"{self.n - 1:032x}")


def _identity(model: str, blocks: int) -> dict[str, str]:
    return build_identity(
        {"version": "0.11.0"},
        {"data": [{"id": model, "max_model_len": 4096, "root": "/models/" + model}]},
        {
            "block_size": "16",
            "cache_dtype": "auto",
            "num_gpu_blocks": str(blocks),
            "enable_prefix_caching": "True",
        },
    )


def _samples(out: Path, clock: _Clock, run: int, ep: str, t0: float, n: int, base: float) -> None:
    for i in range(n):
        clock.now = t0 + 5 * i
        q = base + 1000 * i
        v = {
            "prefix_cache_queries": q,
            "prefix_cache_hits": q * 0.8,
            "prompt_tokens": q,
            "generation_tokens": 200.0 * i,
            "preemptions": float(i // 4),
            "kv_cache_usage": 0.1 + 0.02 * i,
            "running": 8.0,
            "waiting": float(i % 3),
        }
        sample = lines.TimelineSample(
            clock.now, run, ep, {} if i == 3 else v, 4 * i, 8, 0.5 + 0.01 * i
        )
        append_json(out / TIMELINE, sample.to_json())


def _record(fates: Fates, kind: str, run: int, i: int, clock: _Clock) -> None:
    rid = f"r{run}-{i}"
    record = Record(rid, i + 1 + 15 * (run - 1), {"text": "x"})
    state = RecordState(record, "a", started=clock.now - 2 - i % 3)
    if kind == "openai":
        outcome: Answer | Failure
        if i % 5 == 4:
            outcome = http_failure(400, {"error": {"message": "bad prompt 12"}}, b"", "req-x", None)
        elif i == 7:
            outcome = Failure(Kind.TIMEOUT, "timed out")
        else:
            usage = {
                "prompt_tokens": 100 + i,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 64},
            }
            outcome = Answer(200, {"id": "c", "usage": usage}, None, "m", f"req-{i}", {})
        fates.openai(state, outcome)
        return
    state.steps = [
        {
            "step": "a",
            "prompt_tokens": 100 + i,
            "completion_tokens": 20,
            "cached_tokens": 64,
            "model": "m",
        },
        {
            "step": "b",
            "prompt_tokens": 50,
            "completion_tokens": 5,
            "cached_tokens": None,
            "model": "m",
        },
    ]
    if i % 5 == 4:
        too_long = http_failure(400, {"error": {"message": "too long 4000"}}, b"", None, None)
        fates.error(rid if i != 9 else None, record.line, too_long, state.steps[:1], state.started)
    elif i == 7:
        fates.error(rid, record.line, record_failure("line 8: no field text"), [])
    else:
        fates.done(state, "yes" if i % 2 else "no")


def write_job(out: Path, kind: str, clock: _Clock) -> None:
    """Two runs of a 30-record job with every line kind, through the kit's writers."""
    input_kind = "openai" if kind == "openai" else "jsonl"
    manifest = Manifest(
        f"pfp-{input_kind}",
        f"ifp-{input_kind}",
        "input.jsonl",
        input_kind,
        "custom_id" if kind == "openai" else "id",
        30,
    )
    prepare_dir(out, manifest, False)
    for run in (1, 2):
        clock.now = T0 + 1000 * run
        log = serving.ServingLog.load(out)
        found: dict[str, dict[str, str] | None] = {
            EP: _identity("m", 100 if run == 1 else 120),
            EP2: None,
        }
        stack: dict[str, Any] = (
            {"profile": "p", "image": "img", "started_at": "x", "endpoint": EP}
            if run == 1
            else {"local": True, "model": "m", "command": ["vllm", "serve", "m"]}
        )
        context = serving.job_context(
            "pfp", "ifp", {"unavailable": "the endpoints are not on this machine"}, stack
        )
        context["capacity"] = {
            "concurrency": 8,
            "per_endpoint": 4,
            "max_num_seqs": 4 if run == 2 else 16,
            "over": run == 2,
        }
        journal = Journal(out, "id", 0.0)
        journal.open()
        log.write_start(
            run, found, {EP2: "connection refused"}, context, journal.done_ok + journal.done_err
        )
        start = lines.RunEvent(
            "start",
            run,
            clock.now,
            {"concurrency": 8, "endpoints": 2, "schedule": "fifo" if run == 1 else "prefix"},
        )
        append_json(out / RUNS, start.to_json())
        # the epoch the run found (a change mid-run is written, its records keep this one)
        fates = Fates(journal, Stats(), run, RunHooks(epoch=lambda epoch=log.epoch: epoch))
        _samples(out, clock, run, EP, clock.now, 8, 5000.0 * run)
        _samples(out, clock, run, EP2, clock.now + 1, 6, 100.0)
        for i in range(15):
            clock.now = T0 + 1000 * run + 3 * i
            _record(fates, kind, run, i, clock)
            if i == 5 and run == 1:
                change = stall.StallChange(EP, "stalled", 0, 130.04, 3)
                append_json(out / RUNS, stall.log_event(change, run, clock.now))
            if i == 9 and run == 1:
                change = stall.StallChange(EP, "rejoined", 0, 61.66, how="answer")
                append_json(out / RUNS, stall.log_event(change, run, clock.now))
                finished = journal.done_ok + journal.done_err
                log.observe(run, EP, _identity("m2", 100), finished)
                log.observe(run, EP2, _identity("m", 50), finished)
                log.other_model(run, "m-fallback", "m", finished)
        fates.close()
        journal.close()
        end = lines.RunEvent("end", run, clock.now + 1)
        if run == 1:
            end.extra["stopped"] = "interrupted"
        append_json(out / RUNS, end.to_json())
    prefix = {
        "block_size": 16,
        "steps": {"a": {"shared_tokens": 70, "reusable_tokens": 64, "tail_tokens": 6}},
    }
    write_json_atomic(out / "prefix.json", prefix)


@pytest.mark.parametrize("kind", KINDS)
def test_the_writers_write_the_fixture_bytes(kind, tmp_path):
    """Every file the writers make now is the fixture's, byte for byte (the fixture adds
    only its hand-made damaged lines at the end)."""
    clock = _Clock()
    with mock.patch("time.time", clock.time), mock.patch("uuid.uuid4", clock.uuid4):
        write_job(tmp_path / kind, kind, clock)
    names = sorted(p.name for p in (tmp_path / kind).iterdir())
    assert names == sorted(p.name for p in (FIXTURES / kind).iterdir())
    for name in names:
        written = (tmp_path / kind / name).read_bytes()
        if name in LATENCY_FILES:
            # latency_s (issue 34 item 13) came after the fixture: on the monotonic clock, which
            # the pinned clock does not hold, so each finished line has it and it is set aside
            finished = written.count(b'"status":"done"') if name == RESULTS_FILE else 30
            stamps = LATENCY.findall(written)
            assert len(stamps) == finished and all(float(x) >= 0 for x in stamps), (name, stamps)
            written = LATENCY.sub(b"", written)
        fixture = (FIXTURES / kind / name).read_bytes()
        assert fixture.startswith(written), name
        tail = fixture[len(written) :]
        assert tail in _DAMAGE[name], (name, tail)


RESULTS_FILE = "results.jsonl"
LATENCY_FILES = (RESULTS_FILE, "openai-meta.jsonl")  # done lines; every meta line
LATENCY = re.compile(rb',"latency_s":([0-9.]+)')

_DAMAGE = {
    "timeline.jsonl": (b'[1, 2]\n{"run": 1, "endpoint": "http://127.0.0.1:8000", "v": {}}\n',),
    "runs.jsonl": (b'"not an object"\n{"event": "start", "run": 3}\n',),
    "serving.jsonl": (
        b'{"event":"change","endpoint":"http://127.0.0.1:8000","identity":"garbled"}\n',
    ),
    "results.jsonl": (b"", b'{"id":"torn'),
    "manifest.json": (b"",),
    "prefix.json": (b"",),
    "openai-meta.jsonl": (b"",),
}
