"""Before the first record: what the job asks its servers on the side session.

Why apart from the engine: none of these requests is a record's (no retries, nothing in the
journal). Each is bounded and ends in one of three ways: the job is refused with the fix
(exit 2, or exit 1 for --strict-serving), the job runs with a warning and a thinner report,
or it runs as asked. The records' own calls are batch/transport.py's.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp

from sparkops import openai_http
from sparkops.batch import checks, serving
from sparkops.batch.endpoints import EndpointPool
from sparkops.batch.options import JobConfig
from sparkops.batch.workload import Workload
from sparkops.errors import JobStopped
from sparkops.jobdir import identity
from sparkops.jobdir.folder import Manifest
from sparkops.jobdir.run import JobRun
from sparkops.pipeline.check import analyse_step, probe_records
from sparkops.pipeline.prompt import build_messages
from sparkops.privacy import redact


async def preflight(
    side: aiohttp.ClientSession,
    pool: EndpointPool,
    workload: Workload,
    headers: dict[str, str],
    timeout: float,
    budget: float,
) -> tuple[str | None, dict[str, Any] | None]:
    """Check the endpoints serve the model; measure each step's shared prefix for the ceiling.

    Every request here is bounded: /v1/models must answer within `timeout` like an OpenAI
    server (else one line, exit 2). The prefix probes only feed the report's hit-rate
    ceiling, so a hanging or odd /tokenize (all probes within `budget` seconds) degrades to
    "no ceiling" with a note instead of stopping the job. Returns the first endpoint's first
    model and what prefix.json holds (None: nothing to measure).
    """
    base = pool.endpoints[0].base
    default_model = await checks.check_endpoints(  # every endpoint (batch/checks.py)
        side, [ep.base for ep in pool.endpoints], workload.model, headers, timeout
    )
    # constrained steps: every endpoint must hold the constraint (else one line, exit 2)
    await workload.check_server(side, [ep.base for ep in pool.endpoints], headers, timeout)
    probe = workload.prefix_probe
    if probe is None:
        return default_model, None
    bs: int | None = None
    steps: dict[str, Any] = {}
    try:
        async with asyncio.timeout(budget):
            text = await openai_http.get_text(side, pool.endpoints[0].metrics_url, headers)
            bs = openai_http.block_size(text) if text else None
            for step in probe.steps:
                a, b, fixed = probe_records(step)
                toks = [
                    await openai_http.tokenize(
                        side, base, probe.model, build_messages(step, r), headers
                    )
                    for r in (a, b, fixed)
                ]
                p = analyse_step(step, toks[0], toks[1], toks[2], block_size=bs or 16)
                steps[step.name] = {
                    "shared_tokens": p.shared_tokens,
                    "reusable_tokens": p.reusable_tokens,
                    "tail_tokens": p.tail_tokens,
                    "fixed_tokens": p.fixed_tokens,
                }
    except TimeoutError:
        note = f"{base}/tokenize did not answer within {budget:.0f} s"
    except openai_http.AnswerError as err:
        note = f"{base}{err}"
    except (aiohttp.ClientError, OSError, ValueError) as err:
        note = f"{base}/tokenize failed ({type(err).__name__})"
    else:
        return default_model, {"block_size": bs, "steps": steps}
    note = redact(note)  # it names the endpoint: printed, and kept in prefix.json
    print(
        f"sparkops: warning: {note}; the job runs, but its report has no hit-rate ceiling",
        file=sys.stderr,
    )
    return default_model, {"block_size": bs, "steps": {}, "note": note}


async def record_serving(
    side: aiohttp.ClientSession,
    pool: EndpointPool,
    headers: dict[str, str],
    cfg: JobConfig,
    job: JobRun,
    manifest: Manifest,
    stack: dict[str, Any] | None,
) -> serving.ServingLog:
    """The run's start line in serving.jsonl: what serves the job now, against what served
    it before (a resumed job); --strict-serving refuses a changed setup before any request."""
    log = serving.ServingLog.load(cfg.out)
    # the GPU check (a second or two of nvidia-smi samples) runs while the endpoints answer
    gpu = asyncio.create_task(asyncio.to_thread(serving.gpu_state, cfg.endpoints))
    try:
        found: dict[str, identity.Identity | None] = {}
        problems: dict[str, str] = {}
        for ep in pool.endpoints:
            try:
                found[ep.name] = await serving.probe(side, ep.base, ep.metrics_url, headers)
            except openai_http.NoAnswer as err:
                found[ep.name], problems[ep.name] = None, redact(str(err))
        if cfg.strict_serving and (off := log.off_baseline(found)):
            base, changes = next(iter(off.items()))
            raise JobStopped(serving.strict_message(base, changes, during=False))
        gpu_state = await gpu
    finally:
        gpu.cancel()  # stopped or interrupted: no task left pending (a no-op once done)
    context = serving.job_context(
        manifest.pipeline_fingerprint, manifest.input_fingerprint, gpu_state, stack
    )
    if manifest.constraints is not None:  # which steps ran constrained (compare lists it)
        context["constraints"] = manifest.constraints
    # concurrency above the server's --max-num-seqs: said now, kept for the report
    context["capacity"] = identity.capacity(stack, cfg.concurrency, len(pool.endpoints))
    if warning := identity.capacity_warning(context["capacity"]):
        print(f"sparkops: warning: {warning}", file=sys.stderr)
    for base, changes in log.write_start(
        job.number, found, problems, context, job.finished
    ).items():
        print(
            f"sparkops: warning: {serving.change_sentence(base, changes, log.epoch)}",
            file=sys.stderr,
        )
    return log
