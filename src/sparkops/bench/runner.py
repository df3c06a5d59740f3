"""Running a sweep: the batch client once per concurrency level, each level in its own job
directory under the sweep's output, then the table, report and plots.

The per-level job is `sparkops.batch.run_job` unchanged, so a sweep measures exactly the
client a real job uses. With `cold`, every vLLM endpoint's prefix cache is emptied before each
level through vLLM's `POST /reset_prefix_cache`, which vLLM 0.32 exposes only when the server
runs with `VLLM_SERVER_DEV_MODE=1` (a development switch: keep such servers on 127.0.0.1).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.batch.endpoints import normalise_base
from sparkops.batch.job import JobConfig, run_job
from sparkops.bench.plots import write_plots
from sparkops.bench.sweep import (
    LEVEL_ONE_RECORDS,
    LevelSummary,
    mean_call_context,
    report_markdown,
    summarise_level,
    with_predictions,
)
from sparkops.errors import UserError
from sparkops.files import write_atomic
from sparkops.jobdir.reader import JobFolder
from sparkops.plan.decode import DecodeCeiling, decode_ceiling
from sparkops.plan.memory import dtype_bytes
from sparkops.plan.shapes import kv_dtype_of, profile_shape

SWEEP_JSON = "sweep.json"
SWEEP_MD = "sweep.md"


@dataclass
class SweepConfig:
    """Everything a sweep needs; mirrors `sparkops bench sweep` options.

    `job` holds the JobConfig settings every level's job runs with (`endpoints` among them),
    as `batch.options.job_settings` reads them from the shared batch options.
    """

    pipeline: Path
    input: Path
    levels: list[int]
    out: Path
    cold: bool = False
    limit: int | None = None  # records per level (the first N of the input)
    level_one_limit: int | None = LEVEL_ONE_RECORDS  # records at level 1; None: as `limit`
    profile: str | None = None  # the serving profile: its model's shape, for the decode ceiling
    bandwidth_gb_s: float | None = None  # the machine's memory bandwidth, for the same
    job: dict[str, Any] = field(default_factory=dict)

    def records_for(self, concurrency: int) -> int | None:
        """How many records a level runs (None: the whole input)."""
        caps = [n for n in (self.limit,) if n is not None]
        if concurrency == 1 and self.level_one_limit is not None:
            caps.append(self.level_one_limit)
        return min(caps) if caps else None

    @property
    def endpoints(self) -> list[str]:
        return list(self.job.get("endpoints") or [])


@dataclass
class SweepResult:
    levels: list[LevelSummary]
    report: Path
    table: Path
    plots: list[Path] = field(default_factory=list)


def level_dir(out: Path, concurrency: int) -> Path:
    return out / f"level-{concurrency:05d}"


def reset_prefix_cache(endpoint: str, attempts: int = 10, timeout: float = 30.0) -> None:
    """Empty one vLLM server's prefix cache (retrying while requests still hold blocks)."""
    url = normalise_base(endpoint) + "/reset_prefix_cache"
    for _ in range(attempts):
        request = urllib.request.Request(url, data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                body = json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise UserError(
                    f"{url} does not exist: --cold needs vLLM's dev endpoint; start each vLLM "
                    "server with VLLM_SERVER_DEV_MODE=1 (bound to 127.0.0.1), pass the vLLM "
                    "servers themselves rather than a router, or drop --cold"
                ) from None
            raise UserError(f"{url} answered HTTP {err.code}: check the server log") from None
        except (urllib.error.URLError, OSError) as err:
            raise UserError(f"cannot reach {url} ({err}): check --endpoint") from None
        if body.get("success", True):
            return
        time.sleep(1.0)
    raise UserError(
        f"{url} kept refusing to reset (requests still running?): wait for the server to go "
        "idle and re-run the sweep; finished levels are kept"
    )


def sample_input(source: Path, count: int, out: Path) -> Path:
    """The first `count` records of `source` in a private file under the sweep's output.

    JSONL: the first `count` non-blank lines; CSV: the header and the first `count` rows
    (through the csv module, so a quoted field spanning lines stays one row). The records
    are the user's data: the file is 0600 like every job file.
    """
    target = out / f"input-first-{count}{source.suffix}"
    with source.open(encoding="utf-8", newline="") as fh:
        if source.suffix.lower() == ".csv":
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            writer.writerows(itertools.islice(csv.reader(fh), count + 1))
            text = buffer.getvalue()
        else:
            text = "".join(itertools.islice((line for line in fh if line.strip()), count))
    write_atomic(target, text)
    return target


def sweep_ceiling(cfg: SweepConfig, levels: list[LevelSummary]) -> DecodeCeiling | None:
    """The decode ceiling at the sweep's own mean call context, when a profile names the
    model and a bandwidth is known."""
    context = mean_call_context(levels)
    if cfg.profile is None or cfg.bandwidth_gb_s is None or context is None:
        return None
    shape, profile = profile_shape(cfg.profile)
    return decode_ceiling(
        shape,
        width=dtype_bytes(kv_dtype_of(profile)),
        context=context,
        bandwidth_gb_s=cfg.bandwidth_gb_s,
        levels=tuple(lv.concurrency for lv in levels),
    )


def run_sweep(cfg: SweepConfig) -> SweepResult:
    """Run every level (each resumable, like any batch job) and write the report."""
    if not cfg.endpoints:
        raise UserError("no endpoint given: pass --endpoint http://127.0.0.1:8000 (repeatable)")
    if not cfg.input.is_file():
        raise UserError(f"input {cfg.input} does not exist: pass --input RECORDS")
    if not cfg.pipeline.is_file():
        raise UserError(f"pipeline {cfg.pipeline} does not exist: pass --pipeline P.yaml")
    cfg.out.mkdir(parents=True, exist_ok=True, mode=0o700)

    summaries: list[LevelSummary] = []
    for concurrency in cfg.levels:
        if cfg.cold:
            for endpoint in cfg.endpoints:
                reset_prefix_cache(endpoint)
        directory = level_dir(cfg.out, concurrency)
        settings = {**cfg.job, "endpoints": cfg.endpoints}
        count = cfg.records_for(concurrency)
        source = cfg.input if count is None else sample_input(cfg.input, count, cfg.out)
        run_job(
            JobConfig(
                input=source,
                out=directory,
                pipeline=cfg.pipeline,
                concurrency=concurrency,
                **settings,
            )
        )
        level_job = JobFolder(directory)
        summaries.append(
            summarise_level(
                concurrency,
                list(level_job.finished()),
                list(level_job.timeline()),
            )
        )

    summaries = with_predictions(summaries)
    ceiling = sweep_ceiling(cfg, summaries)
    plots = write_plots(summaries, cfg.out, ceiling)
    table = cfg.out / SWEEP_JSON
    write_atomic(
        table,
        json.dumps(
            {
                "cold": cfg.cold,
                "input": cfg.input.name,
                "limit": cfg.limit,
                "level_one_limit": cfg.level_one_limit,
                "decode_ceiling": ceiling.as_dict() if ceiling else None,
                "levels": [lv.as_dict() for lv in summaries],
            },
            indent=2,
        ),
    )
    report = cfg.out / SWEEP_MD
    write_atomic(
        report,
        report_markdown(
            summaries,
            cold=cfg.cold,
            records_file=cfg.input.name,
            plots=[p.name for p in plots],
            ceiling=ceiling,
        ),
    )
    return SweepResult(levels=summaries, report=report, table=table, plots=plots)
