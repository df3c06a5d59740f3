"""Kept-alive connections that can be opened at a pace and recycled now and then, so a
multi-process front end shares the load (off by default: the measurements below).

Why: vLLM's `--api-server-count N` runs N API server processes that accept on one shared
listening socket. A process's accept loop takes every pending connection it finds, so the
~1,000 connections a job opens at its start land mostly on whichever process woke first,
and a kept-alive connection stays there for the whole job. Measured on an H200 with four
API servers (benchmarks/README.md): one process at 120-128% CPU (the front end's limit)
while another idled at 12-44%, and the kit gained 1.32x from four servers where vLLM's own
benchmark gained 2.07x.

Two small measures, both plain HTTP/1.1 and so fine with any server or proxy, and both OFF
by default because the measurements did not support them (below):

- Connections opened at a pace (`ConnectPacer`: at least `gap` seconds apart), so each one
  is a separate accept that any process may win, and a busy process (tokenizing) loses it
  to an idle one. Every connection carries one request at a time, so an even spread of
  connections is an even load.
- Every `every`-th request asks the server to close its connection once it has answered
  (`Connection: close`). Its replacement is accepted by whichever process reaches the
  accept first, an idle one more often than a busy one, so a spread that drifted evens out
  again. The cost is one TCP connect per `every` requests.

Measured on an H200 (vLLM 0.26.0, 4 API servers, 1,000 in flight, benchmarks/README.md):
with a 0.25 ms gap and `every` = 128 the API servers' CPU evened out (45/38/31/27% against
100/98/11/8% without), but the one-step job ran at 241-269 calls/s against 260-292 without
either measure, because with four API servers the engine core (one process at 92-100% CPU,
the GPU at 100%) was the limit, not the front end. The client paid the reconnects and got
nothing back, so both stay available (JobConfig `recycle_every`, `connect_gap`) for a front
end that is the limit (fewer API server processes than it needs), and are off otherwise.
"""

from __future__ import annotations

import time

# Requests per connection before it is recycled (0: kept alive for the whole job). At 1,000
# in flight each connection carries one request at a time, so a connection then lives
# `every` request latencies (seconds each). Off by default: see the measurements above.
RECYCLE_EVERY = 0


class ConnectionRecycler:
    """The headers for each request: every `every`-th one closes its connection after."""

    def __init__(self, headers: dict[str, str], every: int = RECYCLE_EVERY) -> None:
        self.every = every
        self.keep = dict(headers)
        self.close = {**headers, "Connection": "close"}
        self.sent = 0
        self.closed = 0

    def headers(self) -> dict[str, str]:
        """Called once per request attempt; `every` <= 0 never closes."""
        self.sent += 1
        if self.every > 0 and self.sent % self.every == 0:
            self.closed += 1
            return self.close
        return self.keep


# Seconds between two new connections (0: no pacing; 0.00025 opens 1,000 in a quarter of a
# second). Off by default: see the measurements above.
CONNECT_GAP_S = 0.0


class ConnectPacer:
    """Spaces the starts of new connections at least `gap` seconds apart (0: no pacing).

    The pool opens a connection when more calls are outstanding to an endpoint than ever
    before (released connections are reused), so that is when a call waits its turn; no
    hook into aiohttp's connector is needed, and a call on a reused connection never waits.
    """

    def __init__(self, gap: float = CONNECT_GAP_S) -> None:
        self.gap = gap
        self._next = 0.0
        self._peak: dict[str, int] = {}
        self.paced = 0

    def turn(self, endpoint: str, outstanding: int) -> float:
        """Seconds this call waits before it is sent (0.0: at once), given the endpoint's
        outstanding calls, this one included. Plain function, no coroutine: it runs on
        every call, and almost every call returns 0.0."""
        if outstanding <= self._peak.get(endpoint, 0):
            return 0.0
        self._peak[endpoint] = outstanding
        if self.gap <= 0:
            return 0.0
        self.paced += 1
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + self.gap
        return slot - now
