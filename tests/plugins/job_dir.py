"""A job directory's manifest for the journal tests: one valid `Manifest`, fields overridable.

The journal and input tests prepare job directories (`prepare_dir`) with a manifest whose
values only need to be consistent, then change one field to see a resume refused or allowed;
the baseline is spelt here once so a new Manifest field is added in one place.

`methods_table(text)` reads the tables of a job folder's methods.md (item -> value, source)
for the methods and pipeline-copy tests.
"""

from __future__ import annotations

import re
from typing import Any

from sparkops.jobdir.folder import Manifest

BASE: dict[str, Any] = {
    "pipeline_fingerprint": "p1",
    "input_fingerprint": "i1",
    "input": "in.jsonl",
    "kind": "jsonl",
    "id_field": "id",
    "total": 3,
}


def manifest(**overrides: Any) -> Manifest:
    """A valid manifest for a three-record JSONL job; ``overrides`` replace fields."""
    return Manifest(**{**BASE, **overrides})


def methods_table(text: str) -> dict[str, tuple[str, str]]:
    """Every row of methods.md's tables: item -> (value, source)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[0] not in ("Item", "---"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows
