"""Bundled sample job: the stroke-triage pipeline, its prompts and 300 synthetic triage notes
(made up; no real patient data). `sample_paths()` finds them inside the installed package."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def sample_paths() -> tuple[Path, Path]:
    """(pipeline YAML, notes JSONL) of the bundled sample job."""
    return HERE / "stroke-triage.yaml", HERE / "triage_notes.jsonl"
