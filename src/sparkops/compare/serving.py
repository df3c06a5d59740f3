"""What differed between two runs' serving setups (for `sparkops compare`).

Each run's setup is read from its serving.jsonl (batch/serving.py): the endpoints'
identities at the start (paired by position: the URLs themselves differ between runs), the
kit's version, the deployed stack's record and the GPU's identity. A difference in these,
next to the decisions that changed, is the explanation a comparison such as FP8 vs 4-bit
needs; a run whose setup changed mid-way is flagged, since its decisions mix two setups.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.jobdir import serving_lines
from sparkops.jobdir.identity import IdentityChange, diff
from sparkops.jobdir.reader import JobFolder

# GPU fields that describe the hardware and its software, not the moment (clocks, pstate).
GPU_FIELDS = ("name", "driver_version", "cuda_version", "clock_max_mhz", "power_limit_w")

# Stack fields that name the moment or the address, not the setup.
STACK_MOMENT = ("started_at", "endpoint")


@dataclass(frozen=True)
class Setup:
    """One run's serving setup, flattened to `{field: text}`, and its mid-run changes."""

    fields: dict[str, str]
    changes_during: int


def load_setup(run: Path) -> Setup | None:
    """The setup of a run directory (or of the directory of its results.jsonl); None when
    the run has no serving record (made before the kit kept one)."""
    served = list(JobFolder.of(run).serving())
    starts = [x for x in served if isinstance(x, serving_lines.ServingStart)]
    if not starts:
        return None
    changed = sum(1 for x in served if isinstance(x, serving_lines.ServingChange) and x.changes)
    changed += sum(1 for x in starts[1:] if x.changes)
    return Setup(flatten(starts[0]), changed)


def flatten(start: serving_lines.ServingStart) -> dict[str, str]:
    """A start line's setup as comparable fields (endpoint identities by position)."""
    out: dict[str, str] = {}
    endpoints = start.endpoints
    many = len(endpoints) > 1
    for index, ident in enumerate(endpoints.values(), start=1):
        prefix = f"endpoint {index} " if many else ""
        if not isinstance(ident, dict):
            continue
        for key, value in ident.items():
            out[prefix + key] = _text(value)
    out["kit_version"] = _text(start.kit_version)
    # each step's structured-output mode (pipeline/constrain.py): free text vs constrained
    constraints = start.context.get("constraints")
    if isinstance(constraints, dict):
        for step, mode in constraints.items():
            out[f"constrained.{step}"] = _text(mode)
    stack = start.stack
    if isinstance(stack, dict):
        for key, value in stack.items():
            if key not in STACK_MOMENT:
                out[f"stack.{key}"] = _text(value)
    gpu = start.gpu
    chip = gpu.get("gpu") if isinstance(gpu, dict) else None
    if isinstance(chip, dict):
        for key in GPU_FIELDS:
            if chip.get(key) is not None:
                out[f"gpu.{key}"] = _text(chip[key])
    return out


def setup_diff(a: Setup, b: Setup) -> list[IdentityChange]:
    return diff(a.fields, b.fields)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
