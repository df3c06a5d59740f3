"""The score step (issue 38 item 1): a third answer kind added as one module, read through the
same protocol as choices and extractions (pipeline/kinds.py), end to end through the real
workload, journal and results table."""

from __future__ import annotations

import csv

import pytest

from sparkops.batch.fate import Fates, RecordState, Stats
from sparkops.batch.outcome import Answer, Kind
from sparkops.batch.records import Record
from sparkops.batch.workload import Pipeline
from sparkops.errors import UserError
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import RESULTS
from sparkops.jobdir.journal import Journal
from sparkops.pipeline import constrain, table
from sparkops.pipeline.spec import load_pipeline, parse_pipeline
from sparkops.samples import HERE


def pipeline(score: dict, **step: object) -> Pipeline:
    bands = score.get("bands")
    labels = (
        list(bands) if bands else [str(v) for v in range(score["range"][0], score["range"][1] + 1)]
    )
    return Pipeline(
        parse_pipeline(
            {
                "name": "t",
                "model": "m",
                "steps": [
                    {
                        "name": "sev",
                        "user": "Note: {text}",
                        "score": score,
                        "next": {label: "stop" for label in [*labels, "unclear"]},
                        **step,
                    }
                ],
            }
        )
    )


BANDED = {"range": [0, 4], "bands": {"minor": [0, 1], "major": [2, 4]}}


def answer(text: str, reason: str = "stop") -> Answer:
    body = {"choices": [{"message": {"content": text}, "finish_reason": reason}], "model": "m"}
    return Answer(200, body, text, "m", "req", {})


def state() -> RecordState:
    return RecordState(Record("r1", 1, {"text": "x"}), "sev")


@pytest.fixture
def fates(tmp_path):
    journal = Journal(tmp_path, "id", fsync_interval=0)
    journal.open()
    fates = Fates(journal, Stats(), run=1)
    yield fates
    fates.close()
    journal.close()


def test_a_held_score_is_a_choice_of_the_numbers_with_a_budget_for_the_longest():
    work = pipeline({"range": [0, 10]})
    step = work.spec.step("sev")
    assert constrain.step_mode(work.spec, step) == "choice"
    assert constrain.structured_outputs(work.spec, step) == {"choice": [str(v) for v in range(11)]}
    assert work.budget["sev"] == len("10") + 1
    assert step.labels == [*(str(v) for v in range(11)), "unclear"]
    free = pipeline({"range": [0, 10]}, constrain=False)
    assert constrain.structured_outputs(free.spec, free.spec.step("sev")) is None


@pytest.mark.parametrize(
    ("score", "message"),
    [
        ({"range": [5, 1]}, "is empty"),
        ({"range": [0, 5000]}, "keep it to 1,000 or fewer"),
        ({"range": [0, 4], "default": "9"}, "is a number"),
        ({"range": [0, 4], "bands": {"a": [0, 2], "b": [2, 4]}}, "both hold 2"),
        ({"range": [0, 4], "bands": {"a": [0, 1], "b": [3, 4]}}, r"scores \[2\] are in no band"),
        ({"range": [0, 4], "bands": {"a": [0, 9]}}, "not within range"),
        ({"range": [0, 4], "bands": {"unclear": [0, 4]}}, "also the default"),
        ({"range": [3, 3]}, "one number"),
    ],
)
def test_a_score_that_cannot_route_every_answer_is_refused_with_the_fix(score, message):
    with pytest.raises(UserError, match=message):
        pipeline(score)


@pytest.mark.parametrize(
    ("text", "reason", "kind"),
    [
        ("3", "stop", None),
        ("12", "stop", Kind.UNHELD),  # out of the range: the constraint did not hold
        ("Severity 3", "stop", Kind.UNHELD),
        ("1", "length", None),  # cut off inside a number of the range
        ("3", "abort", Kind.UNFINISHED),
    ],
)
def test_a_held_score_outside_the_range_is_never_a_decision(text, reason, kind):
    work = pipeline(BANDED)
    failure = work.judge(state(), answer(text, reason))
    assert (failure.kind if failure else None) is kind


def test_scores_route_by_band_and_reach_the_results_and_the_table(fates, tmp_path):
    work = pipeline(BANDED)
    for rid, text in (("a", "0"), ("b", "3"), ("c", "4")):
        st = RecordState(Record(rid, 1, {"text": "x"}), "sev")
        assert work.answered(st, answer(text), fates) is None
    lines = {line["id"]: line for line in iter_json_lines(tmp_path / RESULTS)}
    assert {k: v["final"] for k, v in lines.items()} == {"a": "minor", "b": "major", "c": "major"}
    assert lines["b"]["steps"][0]["score"] == 3 and lines["b"]["steps"][0]["parsed"] is True
    path = table.write_table(tmp_path, work.spec)
    rows = list(csv.DictReader(path.open(newline="")))
    assert "sev.score" in table.columns(work.spec)
    assert [(r["id"], r["sev"], r["sev.score"]) for r in rows] == [
        ("a", "minor", "0"),
        ("b", "major", "3"),
        ("c", "major", "4"),
    ]


def test_a_cut_number_that_may_start_a_longer_one_is_no_decision(fates, tmp_path):
    work = pipeline({"range": [0, 12]})
    work.answered(state(), answer("1", "length"), fates)  # 1? 10? 11? 12?
    (line,) = iter_json_lines(tmp_path / RESULTS)
    assert line["final"] == "unclear" and line["steps"][0]["parsed"] is False
    assert line["steps"][0]["score"] is None


def test_a_free_score_reads_the_first_integer_in_the_range(fates, tmp_path):
    work = pipeline(BANDED, constrain=False)
    assert work.budget["sev"] == 16
    for rid, text in (("a", "Severity: 3/4."), ("b", "I'd say 7"), ("c", "about 2.5")):
        work.answered(RecordState(Record(rid, 1, {"text": "x"}), "sev"), answer(text), fates)
    got = {
        x["id"]: (x["final"], x["steps"][0]["score"]) for x in iter_json_lines(tmp_path / RESULTS)
    }
    assert got == {"a": ("major", 3), "b": ("unclear", None), "c": ("unclear", None)}


def test_the_sample_score_pipeline_loads_and_old_pipelines_keep_their_fingerprint():
    spec = load_pipeline(HERE / "stroke-triage-severity.yaml")
    assert spec.step("severity").labels == ["minor", "major", "unclear"]
    # pipelines written before score steps existed keep their fingerprints (their jobs
    # resume): the values computed by the release before this change
    before = {"stroke-triage-small": "10cb08ba577a4e7a", "stroke-triage": "1485aed23d5dac5c"}
    for name, fingerprint in before.items():
        assert load_pipeline(HERE / f"{name}.yaml").fingerprint() == fingerprint
