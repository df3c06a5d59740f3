"""The bundled sample's gold labels and its pipeline for the real model."""

from __future__ import annotations

import csv
import json

from sparkops.pipeline.spec import load_pipeline
from sparkops.samples import GOLD, NOTES, PIPELINE, SMALL_PIPELINE, sample_pipeline


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
    assert sample_pipeline("smollm2") == SMALL_PIPELINE
    assert sample_pipeline("tiny") == PIPELINE
