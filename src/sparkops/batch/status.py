"""`sparkops batch status DIR`: how far a job got, from its files alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkops.batch import openai_batch
from sparkops.batch.journal import RESULTS, RUNS, iter_results, load_manifest
from sparkops.batch.lock import lock_holder


def job_status(directory: Path) -> dict[str, Any]:
    """Counts from the job's files, and the pid of a run working on it now (None if none)."""
    manifest = load_manifest(directory)
    done = errors = 0
    for obj in iter_results(directory / RESULTS):
        ok = obj.get("status") == "done" if "status" in obj else openai_batch.is_ok(obj)
        done += ok
        errors += not ok
    runs = [r for r in iter_results(directory / RUNS) if r.get("event") == "start"]
    ended = {r.get("run") for r in iter_results(directory / RUNS) if r.get("event") == "end"}
    total = manifest.get("total")
    if not isinstance(total, int):
        total = 0
    return {
        "total": total,
        "done": done,
        "errors": errors,
        "remaining": max(0, total - done - errors),
        "runs": len(runs),
        "last_run_finished": bool(runs) and runs[-1].get("run") in ended,
        "complete": total > 0 and done + errors >= total,
        "running_pid": lock_holder(directory),
    }
