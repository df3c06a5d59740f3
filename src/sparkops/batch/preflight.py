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
from sparkops.batch import checks
from sparkops.batch.endpoints import metrics_url
from sparkops.batch.workload import Workload
from sparkops.openai_http import ServerClient
from sparkops.pipeline.check import probe_steps
from sparkops.privacy import redact


async def preflight(
    side: ServerClient, bases: list[str], workload: Workload, budget: float
) -> tuple[str | None, dict[str, Any] | None]:
    """Check the endpoints (`bases`, normalised) serve the model; measure each step's shared
    prefix for the ceiling.

    Every request here is bounded: /v1/models must answer within the side client's timeout
    like an OpenAI server (else one line, exit 2). The prefix probes only feed the report's
    hit-rate ceiling, so a hanging or odd /tokenize (all probes within `budget` seconds)
    degrades to "no ceiling" with a note instead of stopping the job. Returns the first
    endpoint's first model and what prefix.json holds (None: nothing to measure).
    """
    base = bases[0]
    # every endpoint (batch/checks.py)
    default_model = await checks.check_endpoints(side, bases, workload.model)
    # constrained steps: every endpoint must hold the constraint (else one line, exit 2)
    await workload.check_server(side, bases)
    probe = workload.prefix_probe
    if probe is None:
        return default_model, None
    bs: int | None = None
    steps: dict[str, Any] = {}
    try:
        async with asyncio.timeout(budget):
            text = await side.get_text(metrics_url(base))
            bs = openai_http.block_size(text) if text else None
            measured = await probe_steps(side, base, probe.model, probe.steps, bs or 16)
            for p in measured:
                steps[p.step] = {
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
