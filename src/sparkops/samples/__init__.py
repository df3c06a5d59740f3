"""Bundled sample job: the stroke-triage pipeline (and its variants for a small real model),
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
DEMO_PIPELINE = HERE / "stroke-triage-demo.yaml"
NOTES = HERE / "triage_notes.jsonl"
GOLD = HERE / "triage_gold.csv"


def sample_paths() -> tuple[Path, Path]:
    """(pipeline YAML, notes JSONL) of the bundled sample job."""
    return PIPELINE, NOTES


def sample_pipeline(model: str) -> Path:
    """The sample pipeline `sparkops demo` runs for local model `model`: stroke-triage.yaml
    (long shared worked examples) for the tiny random model, stroke-triage-demo.yaml for the
    real one (stroke-triage-small.yaml's short questions after a shared ~1,130-token
    reference, so its calls are about the benchmark notes' 1,300 tokens and the shared opening
    fills whole cache blocks; the small file's 40-78-token openings fill none of vLLM-CPU's
    128-token blocks)."""
    return DEMO_PIPELINE if model == "smollm2" else PIPELINE
