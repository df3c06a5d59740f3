"""A job directory's manifest for the journal tests: one valid `Manifest`, fields overridable.

The journal and input tests prepare job directories (`prepare_dir`) with a manifest whose
values only need to be consistent, then change one field to see a resume refused or allowed;
the baseline is spelt here once so a new Manifest field is added in one place.
"""

from __future__ import annotations

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
