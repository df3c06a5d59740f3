"""Several vLLM endpoints (or one LiteLLM URL): spread calls by least outstanding requests.

An endpoint that refuses connections is benched for a short, growing while, so a dead
server does not swallow every call (fast failures would otherwise make it look idle).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sparkops.errors import UserError


def normalise_base(url: str) -> str:
    """`http://h:8000/v1/` and `http://h:8000` both mean base `http://h:8000`.

    A URL without http:// or https:// (`localhost:8000`) is refused with the fix: sent as
    is, it fails as "cannot connect", which sends the user to start a server that is up.
    """
    url = url.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
        fix = f"http://{url}" if not sep and url else "http://HOST:8000"
        raise UserError(f"--endpoint {url!r} is not an http:// or https:// URL; write it as {fix}")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass
class Endpoint:
    base: str
    outstanding: int = 0
    down_until: float = 0.0
    failures: int = 0
    sent: int = 0

    @property
    def chat_url(self) -> str:
        return self.base + "/v1/chat/completions"

    @property
    def metrics_url(self) -> str:
        return self.base + "/metrics"


@dataclass
class EndpointPool:
    endpoints: list[Endpoint]
    _rr: int = field(default=0)

    @classmethod
    def from_urls(cls, urls: list[str]) -> EndpointPool:
        return cls([Endpoint(normalise_base(u)) for u in urls])

    def pick(self, now: float | None = None) -> Endpoint:
        """Healthy endpoint with fewest outstanding calls (round robin among ties)."""
        now = time.monotonic() if now is None else now
        healthy = [e for e in self.endpoints if e.down_until <= now] or self.endpoints
        self._rr += 1
        n = len(healthy)
        best = min(range(n), key=lambda i: (healthy[i].outstanding, (i - self._rr) % n))
        return healthy[best]

    def mark_down(self, ep: Endpoint, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        ep.failures += 1
        ep.down_until = now + min(30.0, 0.5 * 2 ** min(ep.failures, 6))

    def mark_up(self, ep: Endpoint) -> None:
        ep.failures = 0
        ep.down_until = 0.0
