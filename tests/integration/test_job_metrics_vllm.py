"""A job on vLLM-CPU scraped by a real Prometheus (issue 41's "done means"): the running
client's /metrics (`batch run --metrics-port`) and the session's vLLM-CPU server's own
/metrics, side by side, with the kit's alert rules loaded.

The job is held, not raced: its calls go to vLLM through a proxy that holds every call of one
record (by a tag in its text) until the test releases it, so the job is still running, with
every other record finished, for as long as Prometheus takes to scrape it. `--stall-after`
is set far beyond the test's deadline, so the held call is never judged a stalled engine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sparkops.jobdir.folder import MANIFEST
from sparkops.jobdir.status import job_status
from sparkops.samples import sample_paths
from tests.plugins.cli import batch_run, finish, start
from tests.plugins.fault_server import COMPLETION_PATHS, free_port
from tests.plugins.prometheus import Prometheus, rule_names, running_prometheus
from tests.plugins.rewriting_proxy import RewritingProxy

pytestmark = pytest.mark.integration

PIPELINE, NOTES = sample_paths()
RECORDS = 5


class HoldingProxy(RewritingProxy):
    """Forwards everything to vLLM, but holds each completion call whose body carries
    `held` until `release()`."""

    def __init__(self, upstream: str, held: str) -> None:
        super().__init__(upstream)
        self.held = held.encode()
        self._gate: asyncio.Event | None = None

    async def _start(self) -> None:
        self._gate = asyncio.Event()
        await super()._start()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.path in COMPLETION_PATHS and self.held in await request.read():
            assert self._gate is not None
            await self._gate.wait()
        return await super()._forward(request)

    def release(self) -> None:
        assert self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)


def tagged_notes(path: Path, tag: str) -> list[dict]:
    """Writes the first sample notes, each text opened by `tag` (the last one's by
    `tag`-held): unique to this run, so a label that leaked the start of any record's text
    would show it. Returns the notes as they were (ids, texts without the tag)."""
    rows = [json.loads(line) for line in NOTES.read_text().splitlines()[:RECORDS]]
    tagged = [
        {**row, "text": f"[{tag}{'-held' if i == RECORDS - 1 else ''}] {row['text']}"}
        for i, row in enumerate(rows)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in tagged))
    return rows


def scraped(prom: Prometheus, out: Path) -> dict[str, Any]:
    """What the test waits for, read at one moment: the job folder's done and error counts
    (`batch status`'s), and what Prometheus holds of both targets and the job."""
    folder = job_status(out) if (out / MANIFEST).exists() else None
    return {
        "folder": None if folder is None else {"done": folder.done, "errors": folder.errors},
        "up": prom.values("up"),
        "running": prom.values("sparkops_job_running"),
        "done": prom.values("sparkops_job_records_done_total"),
        "in_flight": prom.values('sparkops_job_step_calls_in_flight{step="screen"}'),
    }


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_real_prometheus_scrapes_a_vllm_job_and_vllm_with_the_kits_rules(vllm_server, tmp_path):
    tag = uuid.uuid4().hex[:12]
    job = {"pipeline": PIPELINE, "input": tmp_path / "notes.jsonl", "out": tmp_path / "job"}
    rows = tagged_notes(job["input"], tag)
    job_port = free_port()
    targets = {"sparkops_job": f"http://127.0.0.1:{job_port}", "vllm": vllm_server.base_url}
    extra = ("--metrics-port", str(job_port), "--stall-after", "3600")
    (tmp_path / "prom").mkdir()
    with ExitStack() as cleanup:  # undone last first: the job, Prometheus, the held call
        proxy = HoldingProxy(vllm_server.openai_url, held=f"[{tag}-held]").start()
        cleanup.callback(proxy.close)
        cleanup.callback(proxy.release)
        prom = cleanup.enter_context(running_prometheus(tmp_path / "prom", targets))
        t0 = time.monotonic()
        proc = start(*batch_run(job, proxy.openai_url, extra=extra))
        cleanup.callback(stop, proc)

        # every record but the held one done in the folder, Prometheus' counter the same,
        # the held call in flight, both targets up
        held = RECORDS - 1
        prom.poll(
            lambda: scraped(prom, job["out"]),
            lambda seen: (
                seen
                == {
                    "folder": {"done": held, "errors": 0},
                    "up": {"sparkops_job": "1", "vllm": "1"},
                    "running": {"sparkops_job": "1"},
                    "done": {"sparkops_job": str(held)},
                    "in_flight": {"sparkops_job": "1"},
                }
            ),
            f"{held} records done in the job folder and scraped from the running job",
        )
        prom.poll(
            lambda: {r["metric"]["__name__"] for r in prom.query('{job="vllm"}')},
            lambda names: {"vllm:num_requests_running", "vllm:prompt_tokens_total"} <= names,
            "vLLM's own vllm: series",
        )
        rules = prom.poll(
            prom.rules,
            lambda rules: rules and all(r["health"] == "ok" for r in rules),
            "the kit's rules loaded and evaluated",
        )
        assert {r["name"] for r in rules} == rule_names()

        # patient data: no label of any series, the job's or vLLM's, holds a note's id or text
        series = prom.poll(
            lambda: prom.query('{job=~"sparkops_job|vllm"}'),
            lambda found: {s["metric"]["job"] for s in found} == {"sparkops_job", "vllm"},
            "the job's and vLLM's series",
        )
        labels = {value for s in series for value in s["metric"].values()}
        assert job["out"].name in labels  # the job_folder label: the check sees the job's labels
        leaks = [
            value
            for value in labels
            for row in rows
            if tag in value or row["id"] in value or row["text"] in value
        ]
        assert not leaks, leaks

        proxy.release()
        status, _, stderr = finish(proc, t0, 300)
        assert status == 0, stderr
        assert job_status(job["out"]).done == RECORDS
