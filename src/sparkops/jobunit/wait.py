"""`sparkops batch wait-ready`: wait until the serving stack answers a real request.

The job unit's ExecStartPre (jobunit/unit.py). After a boot the serving unit is "active" as
soon as `docker compose up` returns, and vLLM then loads for minutes; /health may answer while
the engine is gone. The client's own start-up check (batch/checks.py) refuses an endpoint it
cannot reach with exit 2, a configuration error the unit never restarts. So before the client
runs, every endpoint must answer GET /v1/models with a model and one chat completion of one
token (the same tiny request the client's check sends: no record in it).

What counts as ready: a 200 with a choice. An answer of 4xx other than 408/429 is ready too:
the server runs, and the request was refused for a reason the client judges and names itself
(a wrong key, a wrong path: exit 2 with the fix). Everything else waits: no connection, a
timeout, a 5xx, 408/429, a model list still empty. Waiting is one request every `interval`
seconds, said on stderr (the journal) when the reason changes and once a minute, never a crash
loop; `within` bounds it (0: as long as it takes), after which the start fails and the unit's
restart policy counts it like a stopped job.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from sparkops.privacy import redact
from sparkops.urls import api_url

REQUEST_TIMEOUT_S = 30.0
SAY_EVERY_S = 60.0
CHECK_ROUTE = "/v1/chat/completions"
WAIT_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class Probe:
    """One endpoint's answer: ready or not, and what was seen (never an answer's text)."""

    ready: bool
    seen: str


def check_body(model: str) -> dict[str, Any]:
    """The smallest real request: one user word, one token back (no record in it)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Reply with OK."}],
        "max_tokens": 1,
        "temperature": 0,
    }


def judge_models(status: int, body: Any) -> tuple[Probe | None, str | None]:
    """/v1/models' answer: (a verdict, None) to stop here, or (None, the first model)."""
    if status != 200:
        if 400 <= status < 500 and status not in WAIT_STATUSES:
            return Probe(
                True, f"/v1/models answered HTTP {status} (the job's check names why)"
            ), None
        return Probe(False, f"/v1/models answered HTTP {status}"), None
    models = body.get("data") if isinstance(body, dict) else None
    names = [m.get("id") for m in models or [] if isinstance(m, dict)]
    names = [n for n in names if isinstance(n, str)]
    if not names:
        return Probe(False, "/v1/models lists no model yet"), None
    return None, names[0]


def judge_answer(status: int, body: Any, model: str) -> Probe:
    """The chat completion's answer: ready when it came back with a choice."""
    if status == 200:
        choices = body.get("choices") if isinstance(body, dict) else None
        if isinstance(choices, list) and choices:
            return Probe(True, f"{model} answered a chat completion")
        return Probe(False, "a chat completion came back with no choice")
    if 400 <= status < 500 and status not in WAIT_STATUSES:
        return Probe(True, f"a chat completion answered HTTP {status} (the job's check names why)")
    return Probe(False, f"a chat completion answered HTTP {status}")


async def _json(resp: aiohttp.ClientResponse) -> Any:
    try:
        return await resp.json(content_type=None)
    except (ValueError, UnicodeDecodeError):
        return None


async def probe(
    session: aiohttp.ClientSession, base: str, headers: dict[str, str], timeout: float
) -> Probe:
    """Ask one endpoint once: its model list, then one chat completion."""
    try:
        async with asyncio.timeout(timeout):
            async with session.get(api_url(base, "/v1/models"), headers=headers) as resp:
                verdict, model = judge_models(resp.status, await _json(resp))
            if verdict is not None or model is None:
                return verdict or Probe(False, "/v1/models lists no model yet")
            url = api_url(base, CHECK_ROUTE)
            async with session.post(url, json=check_body(model), headers=headers) as resp:
                return judge_answer(resp.status, await _json(resp), model)
    except TimeoutError:
        return Probe(False, f"no answer within {timeout:.0f} s")
    except (aiohttp.ClientError, OSError) as err:
        return Probe(False, f"cannot connect ({type(err).__name__})")


def _say(line: str) -> None:
    print(f"sparkops: {line}", file=sys.stderr, flush=True)


async def wait_ready(
    bases: list[str],
    headers: dict[str, str],
    within: float,
    interval: float = 5.0,
    say: Callable[[str], None] = _say,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """True once every endpoint answered (see the module docstring); False when `within`
    seconds (0: no bound) passed first."""
    start = clock()
    said: dict[str, tuple[str, float]] = {}
    pending = list(dict.fromkeys(bases))
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            for base in list(pending):
                seen = await probe(session, base, headers, REQUEST_TIMEOUT_S)
                name = redact(base)
                if seen.ready:
                    pending.remove(base)
                    say(f"{name}: {seen.seen}; ready")
                    continue
                last = said.get(base)
                if last is None or last[0] != seen.seen or clock() - last[1] >= SAY_EVERY_S:
                    waited = clock() - start
                    say(f"waiting for {name} to answer ({seen.seen}; {waited:.0f} s so far)")
                    said[base] = (seen.seen, clock())
            if not pending:
                return True
            if within and clock() - start + interval > within:
                names = ", ".join(redact(b) for b in pending)
                say(
                    f"{names} did not answer a chat completion within {within:.0f} s "
                    f"(last: {said[pending[0]][0]}); the unit's restart policy tries again"
                )
                return False
            await asyncio.sleep(interval)
