"""The parser and the pipeline on what a real model (SmolLM2-135M-Instruct) actually writes.

Greedy decoding (temperature 0) makes each answer repeatable for one model and vLLM build.
Every test first asserts the raw text has the form under test (capitalised, punctuated, a word
before the label, a non-answer), so a model that stops writing that form fails the test
instead of quietly testing nothing, then asserts the parser's reading and the route it takes.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from sparkops.local.server import Server
from sparkops.pipeline.parse import parse_answer
from sparkops.pipeline.route import next_step
from sparkops.pipeline.spec import PipelineSpec, load_pipeline
from sparkops.samples import NOTES, SMALL_PIPELINE

pytestmark = pytest.mark.integration

SPEC: PipelineSpec = load_pipeline(SMALL_PIPELINE)
NOTE = {json.loads(line)["id"]: json.loads(line)["text"] for line in NOTES.open()}
# An instruction this model answers with chatter instead of a label (seen: "I'm sorry for your
# loss, but..."), to show a non-answer's route.
OFF_TASK = (
    "You check triage notes for stroke symptoms.\nStroke symptoms: weakness, numbness, slurred "
    "speech, word-finding difficulty, trouble understanding speech, facial droop, loss of "
    "vision, vertigo.\nIf the note has a stroke symptom, reply Yes. Otherwise reply No.\n"
)


def _answer(server: Server, system: str, note_id: str) -> str:
    body = {
        "model": server.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Note: {NOTE[note_id]}"},
        ],
        "max_tokens": 8,
        "temperature": 0,
    }
    request = urllib.request.Request(
        f"{server.openai_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as resp:
        return json.load(resp)["choices"][0]["message"]["content"]


def test_capitalised_yes_reads_as_yes_and_goes_on(real_vllm_server: Server) -> None:
    screen = SPEC.step("screen")
    text = _answer(real_vllm_server, screen.system, "note-0003")  # left leg weakness
    # Seen: "Yes" from a server on its own, "Yes." from one busy with other requests.
    assert text[0] == "Y" and text.lower() != text
    assert parse_answer(text, screen.parse) == "yes"
    assert next_step(SPEC, "screen", "yes") == "detail"


def test_a_word_before_the_label_still_reads_as_the_label(real_vllm_server: Server) -> None:
    detail = SPEC.step("detail")
    text = _answer(real_vllm_server, detail.system, "note-0003")
    words = text.lower().replace(",", " ").split()
    assert words[0] not in detail.parse.choices and "stroke" in words  # e.g. "A stroke, ..."
    assert "," in text  # punctuation straight after the label
    assert parse_answer(text, detail.parse) == "stroke"


def test_off_task_answer_takes_the_steps_default_route(real_vllm_server: Server) -> None:
    screen = SPEC.step("screen")
    text = _answer(real_vllm_server, OFF_TASK, "note-0003")
    words = {w.strip(".,!?'") for w in text.lower().split()}
    assert not words & {"yes", "no"}, text  # no label anywhere in what it wrote
    label = parse_answer(text, screen.parse)
    assert label == screen.parse.default == "unclear"
    assert next_step(SPEC, "screen", label) == "detail"


def test_sample_job_on_the_real_model_gives_varied_decisions_and_early_exits(
    real_vllm_server: Server, tmp_path: Path
) -> None:
    """The point of a layered pipeline: records ruled out at the screen finish after one
    call. On 40 notes the real model says both yes and no, so some stop early, some go on."""
    from sparkops.batch import JobConfig, run_job
    from sparkops.compare.runs import load_run

    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(NOTES.open().readlines()[:40]))
    out = tmp_path / "job"
    run_job(
        JobConfig(
            input=notes,
            out=out,
            endpoints=[real_vllm_server.base_url],
            pipeline=SMALL_PIPELINE,
            concurrency=16,
        )
    )
    lines = [json.loads(line) for line in (out / "results.jsonl").open()]
    assert sorted(line["id"] for line in lines) == sorted(NOTE)[:40]
    calls = [len(line["steps"]) for line in lines]
    assert 1 in calls and 3 in calls, calls
    decisions = load_run(out).decisions
    assert {"yes", "no"} <= set(decisions.values()), decisions
    for line in lines:  # every step's label is the parser's reading of that step's raw text
        for step in line["steps"]:
            assert step["answer"] == parse_answer(step["raw"], SPEC.step(step["step"]).parse)
