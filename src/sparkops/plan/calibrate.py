"""Measured runs as the planner reads them: a sweep level (sweep.json) or a job (report.json).

Both carry the same figures under the same names (metrics/timeline.TokenRates): the computed
tok/s over the steady window, the steady records/min, and what bound the run. A calibration
run gives `plan throughput` its computed tok/s; a target run gives the tokens per record and
hit rate to predict for, and its measured records/min to check the prediction against.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.errors import UserError
from sparkops.inputs import read_json
from sparkops.jobdir.job_report import JobReport
from sparkops.jobdir.reader import JobFolder

SWEEP_JSON = "sweep.json"


@dataclass(frozen=True)
class Measured:
    """One measured run, in the planner's terms."""

    label: str  # "sweep level 960", "job report.json"
    computed_tok_s: float | None
    prompt_tokens: float | None  # per record, all of its calls
    gen_tokens: float | None
    hit_rate: float | None
    records_per_min: float | None  # steady
    bottleneck: str | None


def _number(row: dict[str, Any], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _steady_or_whole(row: dict[str, Any]) -> float | None:
    """The level's steady hit rate, or the whole level's where no steady figure was measured
    (a steady 0.0 is a measurement, not a gap)."""
    steady = _number(row, "hit_rate_steady")
    return steady if steady is not None else _number(row, "hit_rate")


def sweep_levels(path: Path) -> list[dict[str, Any]]:
    """The level rows of a sweep's sweep.json (given directly or as the sweep's folder)."""
    file = path / SWEEP_JSON if path.is_dir() else path
    fix = "pass a sweep's sweep.json (or its folder) written by `sparkops bench sweep`"
    data = read_json(file, what="sweep table", fix=fix)
    levels = data.get("levels")
    if not isinstance(levels, list) or not all(isinstance(row, dict) for row in levels):
        raise UserError(f"{file} has no list of levels: {fix}")
    return levels


def from_sweep(path: Path, level: int | None) -> Measured:
    """A level of a sweep (default: the highest level with a computed rate)."""
    rows = sweep_levels(path)
    rated = [
        r for r in rows if _number(r, "computed_tok_s") and isinstance(r.get("concurrency"), int)
    ]
    if level is None:
        if not rated:
            raise UserError(f"{path}: no level has a computed tok/s (was /metrics reachable?)")
        row = max(rated, key=lambda r: r["concurrency"])
    else:
        found = [r for r in rows if r.get("concurrency") == level]
        if not found:
            have = ", ".join(str(r.get("concurrency")) for r in rows)
            raise UserError(f"{path} has no level {level}: its levels are {have}")
        row = found[0]
    return Measured(
        label=f"sweep level {row['concurrency']}",
        computed_tok_s=_number(row, "computed_tok_s"),
        prompt_tokens=_number(row, "prompt_tokens_per_record"),
        gen_tokens=_number(row, "gen_tokens_per_record"),
        hit_rate=_steady_or_whole(row),
        records_per_min=_number(row, "records_per_min"),
        bottleneck=row.get("bottleneck") if isinstance(row.get("bottleneck"), str) else None,
    )


def from_report(path: Path) -> Measured:
    """A job's report.json (given directly or as the job folder), read as the typed report:
    a figure an older report lacks reads as None."""
    file = JobFolder(path).files.report_json if path.is_dir() else path
    fix = "pass a job's report.json (or its folder) written by `sparkops report`"
    report = JobReport.from_json(read_json(file, what="job report", fix=fix))
    calls = report.calls_per_record
    prompt = report.prompt_tokens_per_call
    gen = report.completion_tokens_per_call
    return Measured(
        label=f"job {file}",
        computed_tok_s=report.computed_tok_s,
        prompt_tokens=prompt * calls if prompt is not None and calls else None,
        gen_tokens=gen * calls if gen is not None and calls else None,
        hit_rate=report.prefix_cache_hit_rate,
        records_per_min=report.records_per_min_steady,
        bottleneck=report.bottleneck,
    )
