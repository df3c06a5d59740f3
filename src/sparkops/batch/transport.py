"""One HTTP attempt of one call, classified: an `Answer` or a typed `Failure` (batch/outcome.py).

The transport owns what one attempt touches: the engine's pooled client (its aiohttp session
and auth headers, sparkops.openai_http.ServerClient), the request headers (with connection
recycling, batch/connections.py), connection pacing, and the endpoint's
bookkeeping for the stall watch (a call in flight, whether it was answered). It decides
nothing about retries or records: the engine reads the outcome's kind.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import aiohttp

from sparkops import json_codec
from sparkops.batch.connections import ConnectionRecycler, ConnectPacer
from sparkops.batch.endpoints import Endpoint, EndpointPool
from sparkops.batch.outcome import (
    TIMED_OUT,
    Kind,
    Outcome,
    classify_200,
    http_failure,
    transport_failure,
)
from sparkops.batch.retry import retry_after_seconds
from sparkops.openai_http import ServerClient


class Transport:
    """Sends one attempt to one endpoint and says what came back."""

    def __init__(
        self, client: ServerClient, pool: EndpointPool, recycle_every: int, connect_gap: float
    ) -> None:
        self.client = client
        self.pool = pool
        headers = {"Content-Type": "application/json", **client.headers}
        self.conns = ConnectionRecycler(headers, recycle_every)
        self.pacer = ConnectPacer(connect_gap)

    async def attempt(self, ep: Endpoint, path: str, payload: bytes, want_text: bool) -> Outcome:
        """One POST. `want_text`: the caller routes on the answer's text, so a 200 without
        text is a failure (pipeline steps); OpenAI batch lines keep whatever choice came."""
        pool = self.pool
        ep.outstanding += 1
        ep.sent += 1
        started = time.monotonic()
        pool.call_started(ep, started)  # stall watch: this task has a call in flight here
        answered = timed_out = False
        try:
            if (wait := self.pacer.turn(ep.base, ep.outstanding)) > 0:  # a new connection
                await asyncio.sleep(wait)
            async with self.client.post(
                ep.base + path, data=payload, headers=self.conns.headers()
            ) as resp:
                raw = await resp.read()
                answered = True
                status = resp.status
                rid = resp.headers.get("x-request-id")
                retry_after = resp.headers.get("Retry-After") if status != 200 else None
        except asyncio.CancelledError:
            why = pool.take_reroute(asyncio.current_task())
            if why is None:
                raise  # the job is stopping
            return why  # cancelled by the stall watch: re-routed, or this call stalled alone
        except (aiohttp.ClientError, OSError) as err:  # refused, reset, bad payload, ...
            return transport_failure(err)
        except TimeoutError:
            timed_out = True
            return TIMED_OUT
        finally:
            ep.outstanding -= 1
            now = time.monotonic()
            pool.call_ended(ep, now, answered, now - started, timed_out)
        try:
            body = json_codec.decode(raw) if raw else None
        except ValueError:
            body = None
        if status == 200:
            return classify_200(path, body, rid, want_text)
        failure = http_failure(status, body, raw, rid, retry_after_seconds(retry_after))
        if status == 404 and not want_text:
            # An OpenAI batch line names its own url: a route the server does not serve (an
            # embeddings line sent to a chat model) is that line's fault, not the endpoint's.
            return replace(failure, kind=Kind.RECORD)
        return failure
