"""Bundled sample job: the stroke-triage pipeline (and its variant for a small real model),
its prompts, 300 synthetic triage notes (made up; no real patient data) and their gold labels.
`sample_paths()` finds them inside the installed package.

The gold labels (triage_gold.csv: id, label, kind) are the generator's truth for each note:
`kind` is the presenting complaint's class (stroke: a focal deficit such as facial droop, arm
weakness, slurred speech, word-finding difficulty, visual loss, numbness, vertigo with ataxia;
mimic: a neurological look-alike with a non-stroke cause such as hypoglycaemia, seizure,
migraine with aura, Bell's palsy, sepsis, intoxication; other: no neurological complaint), and
`label` is "yes" (call the stroke team) for kind stroke, "no" otherwise. Onset time is not part
of the label. `sparkops compare RUN_A RUN_B --gold triage_gold.csv` scores runs against it.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PIPELINE = HERE / "stroke-triage.yaml"
SMALL_PIPELINE = HERE / "stroke-triage-small.yaml"
NOTES = HERE / "triage_notes.jsonl"
GOLD = HERE / "triage_gold.csv"


def sample_paths() -> tuple[Path, Path]:
    """(pipeline YAML, notes JSONL) of the bundled sample job."""
    return PIPELINE, NOTES


def sample_pipeline(model: str) -> Path:
    """The sample pipeline for local model `model`: stroke-triage.yaml (long shared
    instructions, the prefix-cache showcase) for the tiny random model, stroke-triage-small.yaml
    (short instructions a 135M model can follow) for the real one."""
    return SMALL_PIPELINE if model == "smollm2" else PIPELINE
