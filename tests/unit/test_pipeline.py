"""Pipeline spec, prompt building, answer parsing and routing (pure, no server)."""

from __future__ import annotations

import pytest

from sparkops.errors import UserError
from sparkops.pipeline.check import analyse_step, ceiling, common_prefix, literal_after_first_field
from sparkops.pipeline.parse import parse_answer
from sparkops.pipeline.prompt import RecordError, build_messages, build_request
from sparkops.pipeline.route import next_step
from sparkops.pipeline.spec import ParseSpec, load_pipeline
from sparkops.samples import sample_paths

PIPELINE = """\
name: t
model: tiny
steps:
  - name: screen
    system: prompts/screen.txt
    user: "Note:\\n{text}"
    max_tokens: 8
    parse: {choices: [yes, no], default: unclear}
    next: {yes: detail, no: stop, unclear: detail}
  - name: detail
    system: "Inline instructions."
    user: "{text}"
    parse: {choices: [stroke, mimic]}
    next: {stroke: stop, mimic: stop, unclear: stop}
"""


def write(tmp_path, text=PIPELINE, prompt="Screen instructions.\n"):
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "screen.txt").write_text(prompt)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def test_yes_no_stay_strings_and_prompt_files_resolve(tmp_path):
    spec = load_pipeline(write(tmp_path))
    screen = spec.step("screen")
    assert screen.parse.choices == ["yes", "no"]
    assert screen.next == {"yes": "detail", "no": "stop", "unclear": "detail"}
    assert screen.system == "Screen instructions.\n"
    assert spec.step("detail").system == "Inline instructions."


def test_bundled_sample_pipeline_is_valid():
    pipeline, notes = sample_paths()
    spec = load_pipeline(pipeline)
    assert [s.name for s in spec.steps] == ["screen", "detail", "confirm"]
    assert len(spec.step("screen").system) > 3 * len(spec.step("detail").system)
    assert sum(1 for _ in notes.open()) == 300


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("no: stop, unclear: detail}", "no: nowhere, unclear: detail}", "unknown step 'nowhere'"),
        ("{yes: detail, no: stop, unclear: detail}", "{yes: detail, no: stop}", "no route for"),
        (
            "{stroke: stop, mimic: stop, unclear: stop}",
            "{stroke: screen, mimic: stop, unclear: stop}",
            "loop",
        ),
        ("prompts/screen.txt", "prompts/missing.txt", "not found"),
        ('"Note:\\n{text}"', '"Note: {text.upper}"', "plain record field"),
        ("max_tokens: 8", "max_tokens: 0", "max_tokens"),
        ("{yes: detail,", "{maybe: detail, yes: detail,", "label 'maybe'"),
    ],
)
def test_invalid_pipelines_are_refused_with_the_fix(tmp_path, old, new, message):
    assert old in PIPELINE
    with pytest.raises(UserError, match=message):
        load_pipeline(write(tmp_path, PIPELINE.replace(old, new)))


def test_missing_pipeline_file_names_the_option(tmp_path):
    with pytest.raises(UserError, match="--pipeline"):
        load_pipeline(tmp_path / "nope.yaml")


def test_messages_put_shared_text_first_and_record_last(tmp_path):
    spec = load_pipeline(write(tmp_path))
    msgs = build_messages(spec.first, {"id": "r1", "text": "62M weakness"})
    assert msgs == [
        {"role": "system", "content": "Screen instructions.\n"},
        {"role": "user", "content": "Note:\n62M weakness"},
    ]
    other = build_messages(spec.first, {"id": "r2", "text": "something else"})
    assert other[0] == msgs[0]  # byte-identical prefix for every record
    body = build_request(spec.first, spec.model, {"text": "x"})
    assert body["max_tokens"] == 8 and body["temperature"] == 0 and body["model"] == "tiny"


def test_missing_record_field_is_a_record_error(tmp_path):
    spec = load_pipeline(write(tmp_path))
    with pytest.raises(RecordError, match="text"):
        build_messages(spec.first, {"id": "r1", "note": "x"})


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("yes", "yes"),
        ("Yes.", "yes"),
        ("  NO, not a stroke", "no"),
        ("Answer: yes", "yes"),
        ("yes or no", "yes"),
        ("maybe yes maybe no", "unclear"),
        ("evevev^^^", "unclear"),
        ("", "unclear"),
        (None, "unclear"),
    ],
)
def test_parse_is_defensive(text, label):
    assert parse_answer(text, ParseSpec(choices=["yes", "no"], default="unclear")) == label


def test_routing_follows_next_and_falls_through(tmp_path):
    spec = load_pipeline(write(tmp_path))
    assert next_step(spec, "screen", "yes") == "detail"
    assert next_step(spec, "screen", "no") is None
    assert next_step(spec, "detail", "unclear") is None
    nonext = PIPELINE.replace("    next: {yes: detail, no: stop, unclear: detail}\n", "")
    spec2 = load_pipeline(write(tmp_path, nonext))
    assert next_step(spec2, "screen", "no") == "detail"


def test_fingerprint_changes_with_any_prompt_byte(tmp_path):
    a = load_pipeline(write(tmp_path)).fingerprint()
    assert load_pipeline(write(tmp_path)).fingerprint() == a
    assert load_pipeline(write(tmp_path, prompt="Screen instructions. \n")).fingerprint() != a


def test_prefix_analysis_counts_whole_blocks_and_flags_record_first(tmp_path):
    spec = load_pipeline(write(tmp_path))
    shared = list(range(300))
    p = analyse_step(spec.first, [*shared, 1000, 5], [*shared, 2000, 5], [*shared, 7], 128)
    assert (p.shared_tokens, p.reusable_tokens, p.tail_tokens) == (300, 256, 44)
    assert p.warnings == []
    bad = analyse_step(spec.first, [1, *shared], [2, *shared], shared, 128)
    assert bad.shared_tokens == 0 and any("put the record last" in w for w in bad.warnings)
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert literal_after_first_field("{text} then instructions") == len(" then instructions")
    assert ceiling([(256, 300), (0, 100)]) == pytest.approx(256 / 400)
