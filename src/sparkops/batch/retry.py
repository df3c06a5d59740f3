"""Backoff with full jitter, and which failures are worth retrying."""

from __future__ import annotations

import random

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def backoff_delay(attempt: int, base: float = 0.5, cap: float = 20.0, rng=random.random) -> float:
    """Seconds to wait before retry number `attempt` (1-based): uniform in [0, min(cap, base*2^n)].

    Full jitter spreads 1,000 retrying calls over the window instead of re-sending them in
    one burst when a server comes back.
    """
    return rng() * min(cap, base * 2 ** (attempt - 1))


def is_retryable(status: int) -> bool:
    """429 and 5xx are transient; other 4xx are the record's own error."""
    return status in RETRY_STATUS or status >= 500
