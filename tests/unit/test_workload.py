"""The two workloads at their seam (batch/workload.py): the request a record makes, what an
answer does to it, and the results line its error gets, read back from the real journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops.batch.fate import Fates, RecordState, Stats
from sparkops.batch.outcome import Answer, Kind, http_failure, record_failure
from sparkops.batch.records import InputProblem, Record
from sparkops.batch.workload import OpenAIBatch, Pipeline, RecordError, workload_for
from sparkops.errors import UserError
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import META, RESULTS
from sparkops.jobdir.journal import Journal
from sparkops.pipeline.spec import parse_pipeline

SPEC = parse_pipeline(
    {
        "name": "t",
        "model": "m",
        "steps": [
            {
                "name": "a",
                "user": "{text}",
                "parse": {"choices": ["yes", "no"]},
                "next": {"yes": "b", "no": "stop", "unclear": "stop"},
            },
            {"name": "b", "user": "{text} {more}", "parse": {"choices": ["x", "y"]}},
        ],
    }
)


def answer(text: str, model: str = "m") -> Answer:
    body = {"choices": [{"message": {"content": text}}], "model": model}
    usage = {"prompt_tokens": 7, "completion_tokens": 1, "prompt_tokens_details": None}
    return Answer(200, body, text, model, "req-1", usage)


@pytest.fixture
def fates(tmp_path):
    journal = Journal(tmp_path, "id", fsync_interval=0)
    journal.open()
    fates = Fates(journal, Stats(), run=1)
    yield fates
    fates.close()
    journal.close()


def test_workload_for_picks_by_the_input_and_the_pipeline():
    assert isinstance(workload_for("jsonl", SPEC), Pipeline)
    assert isinstance(workload_for("openai", None), OpenAIBatch)
    assert (Pipeline(SPEC).journal_key, OpenAIBatch().journal_key) == ("id", "custom_id")
    assert (Pipeline(SPEC).steps, OpenAIBatch().steps) == (2, 1)
    assert (Pipeline(SPEC).model, OpenAIBatch().model) == ("m", None)
    assert Pipeline(SPEC).fingerprint() == SPEC.fingerprint()
    assert OpenAIBatch().fingerprint() == "openai-batch"
    assert OpenAIBatch().prefix_probe is None
    assert Pipeline(SPEC).prefix_probe == ("m", SPEC.steps)


def test_a_pipeline_record_is_routed_through_its_steps_then_done(tmp_path, fates):
    w = Pipeline(SPEC)
    state = RecordState(Record("r1", 3, {"text": "hi", "more": "there"}), w.first_step)
    path, body = w.request(state, default_model="other")
    assert path == "/v1/chat/completions" and body["model"] == "m"
    assert body["messages"][-1] == {"role": "user", "content": "hi"}
    assert w.answered(state, answer("Yes"), fates) == "b"
    state.step = "b"
    assert w.request(state, None)[1]["messages"][-1]["content"] == "hi there"
    assert w.answered(state, answer("x", model="m2"), fates) is None
    (line,) = iter_json_lines(tmp_path / RESULTS)
    assert line["status"] == "done" and line["final"] == "x" and line["line"] == 3
    assert [(s["step"], s["answer"], s["raw"], s["model"]) for s in line["steps"]] == [
        ("a", "yes", "Yes", "m"),
        ("b", "x", "x", "m2"),
    ]
    assert line["steps"][0]["prompt_tokens"] == 7 and not (tmp_path / META).exists()


def test_a_pipeline_record_missing_a_field_cannot_be_sent_and_the_first_one_is_refused():
    w = Pipeline(SPEC)
    state = RecordState(Record("r1", 1, {"text": "hi"}), "b")
    with pytest.raises(RecordError, match="more"):
        w.request(state, None)
    with pytest.raises(UserError, match=r"step 'b' uses field\(s\) \['more'\].*line 4 has: text"):
        w.check_first(Record("r1", 4, {"text": "hi"}), Path("in.jsonl"))
    w.check_first(Record("r1", 4, {"text": "hi", "more": ""}), Path("in.jsonl"))


def test_pipeline_errors_are_results_lines_with_the_steps_so_far(tmp_path, fates):
    w = Pipeline(SPEC)
    state = RecordState(Record("r1", 2, {"text": "hi"}), w.first_step)
    w.answered(state, answer("yes"), fates)
    finish = w.failed(
        state, http_failure(400, {"error": {"message": "bad"}}, b"", None, None), fates
    )
    assert not (tmp_path / RESULTS).read_text()  # held until called (fail-fast may hold it)
    finish()
    w.input_problem(InputProblem(5, "line 5: not valid JSON"), record_failure("x"), fates)()
    first, second = iter_json_lines(tmp_path / RESULTS)
    assert (first["id"], first["status"], first["error"]) == ("r1", "error", "HTTP 400: bad")
    assert [s["step"] for s in first["steps"]] == ["a"] and first["failure"]["code"] == 400
    assert (second["id"], second["line"], second["steps"]) == (None, 5, [])
    assert second["failure"]["kind"] == Kind.RECORD.value


def test_an_openai_line_is_sent_as_written_and_kept_as_answered(tmp_path, fates):
    w = OpenAIBatch()
    line = {"custom_id": "c1", "url": "/v1/embeddings", "body": {"input": "x"}}
    state = RecordState(Record("c1", 1, line), w.first_step)
    assert w.request(state, "served") == ("/v1/embeddings", {"input": "x", "model": "served"})
    named = RecordState(Record("c2", 2, {"body": {"model": "mine"}}), w.first_step)
    assert w.request(named, "served") == ("/v1/chat/completions", {"model": "mine"})
    assert line["body"] == {"input": "x"}  # the input's own dict is not changed
    assert w.answered(state, answer("anything"), fates) is None
    w.failed(named, http_failure(404, None, b"no route", None, None), fates)()
    w.input_problem(InputProblem(3, "line 3: no body", "c3"), record_failure("no body"), fates)()
    out = list(iter_json_lines(tmp_path / RESULTS))
    assert [o["custom_id"] for o in out] == ["c1", "c2", "c3"]
    assert out[0]["response"]["status_code"] == 200 and out[0]["error"] is None
    assert out[1]["response"]["status_code"] == 404
    assert out[2]["response"] is None and out[2]["error"]["line"] == 3
    meta = list(iter_json_lines(tmp_path / META))
    assert [(m["custom_id"], m["ok"]) for m in meta] == [("c1", True), ("c2", False), ("c3", False)]
    assert fates.stats.done == 1 and fates.stats.errors == 2
