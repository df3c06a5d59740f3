"""Reading the inputs of a comparison: two runs' `results.jsonl` and an optional gold CSV.

A run is a batch output directory (or its `results.jsonl`): one JSON line per finished record
with `id`, `status` and `final` (the pipeline's decision). Records with status other than
"done" are counted, not compared. A torn last line (a killed run) is skipped, as the journal
itself would repair it; a bad line elsewhere is refused with its line number.
"""

from __future__ import annotations

import csv
import filecmp
import json
from dataclasses import dataclass
from pathlib import Path

from sparkops.errors import UserError
from sparkops.jobdir.folder import RESULTS
from sparkops.jobdir.lines import outcome
from sparkops.jobdir.reader import JobFolder


@dataclass(frozen=True)
class RunDecisions:
    """The decisions of one run, keyed by record id."""

    path: Path
    decisions: dict[str, str]
    errors: int
    duplicates: int


def results_path(run: Path) -> Path:
    """A run directory's results file, or the file itself."""
    path = JobFolder(run).files.results if run.is_dir() else run
    if not path.is_file():
        raise UserError(
            f"{path} does not exist: pass a batch output directory (holding {RESULTS}) "
            "or a results.jsonl file"
        )
    return path


def load_run(run: Path) -> RunDecisions:
    """Read `id -> final` for every record the run finished."""
    path = results_path(run)
    lines = path.read_text(encoding="utf-8").splitlines()
    decisions: dict[str, str] = {}
    errors = duplicates = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # torn tail of an interrupted run
            raise UserError(
                f"{path} line {number} is not JSON: is this a sparkops results.jsonl?"
            ) from None
        if not isinstance(obj, dict) or "id" not in obj:
            raise UserError(
                f"{path} line {number} has no 'id': pass a sparkops batch results.jsonl"
            )
        result = outcome({"status": "done", **obj})  # a line without status: a decision
        if result.final is None:
            errors += 1
            continue
        key = str(obj["id"])
        if key in decisions:
            duplicates += 1
        decisions[key] = result.final
    return RunDecisions(path=path, decisions=decisions, errors=errors, duplicates=duplicates)


def same_job(run_a: RunDecisions, run_b: RunDecisions) -> str | None:
    """Why the two runs are one job (None when they are two): the same results file (one
    folder twice, or a folder and its results.jsonl) or a byte-for-byte copy of it. Warned,
    not refused: agreement is 100% by construction, but the gold figures are still that one
    run's, which is a use (scoring one run); saying nothing let it read as a validation."""
    if run_a.path.samefile(run_b.path):
        what = f"the same job ({run_a.path})"
    elif filecmp.cmp(run_a.path, run_b.path, shallow=False):
        what = f"one job's results byte for byte ({run_a.path}, {run_b.path}: a copy?)"
    else:
        return None
    return (
        f"run A and run B are {what}: agreement is 100% by construction and says nothing "
        "about run-to-run noise; compare two runs of the same input to measure it"
    )


def load_gold(path: Path, id_field: str = "id", label_field: str = "label") -> dict[str, str]:
    """Read `id -> label` from a CSV with a header row."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"gold labels {path} do not exist: pass --gold labels.csv") from None
    with handle:
        reader = csv.DictReader(handle)
        fields = reader.fieldnames or []
        missing = [name for name in (id_field, label_field) if name not in fields]
        if missing:
            raise UserError(
                f"{path} has no column(s) {missing} (columns: {fields}): add them or pass "
                "--gold-id-field / --gold-label-field"
            )
        gold: dict[str, str] = {}
        for number, row in enumerate(reader, start=2):
            key, label = (row.get(id_field) or "").strip(), (row.get(label_field) or "").strip()
            if not key or not label:
                raise UserError(f"{path} line {number} lacks an id or a label: fill it or drop it")
            if key in gold:
                raise UserError(f"{path} line {number} repeats id {key!r}: keep one label per id")
            gold[key] = label
    return gold
