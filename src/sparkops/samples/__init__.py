"""Bundled sample job: the stroke-triage pipeline, its prompts, 300 synthetic triage notes
(made up; no real patient data) and their gold labels. `sample_paths()` finds them inside the
installed package.

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

import yaml

HERE = Path(__file__).resolve().parent
PIPELINE = HERE / "stroke-triage.yaml"
NOTES = HERE / "triage_notes.jsonl"
GOLD = HERE / "triage_gold.csv"


def sample_paths() -> tuple[Path, Path]:
    """(pipeline YAML, notes JSONL) of the bundled sample job."""
    return PIPELINE, NOTES


def sample_pipeline(model: str, folder: Path) -> Path:
    """The sample pipeline for served model `model`: the bundled file when it already names
    that model, else a copy in `folder` that differs only in `model:` (prompt files by their
    absolute path, so the copy reads the very same prompts)."""
    raw = yaml.safe_load(PIPELINE.read_text(encoding="utf-8"))
    if raw["model"] == model:
        return PIPELINE
    raw["model"] = model
    for step in raw["steps"]:
        prompt = HERE / step["system"]
        if prompt.is_file():
            step["system"] = str(prompt)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / PIPELINE.name
    copy.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return copy
