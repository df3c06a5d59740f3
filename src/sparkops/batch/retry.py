"""Backoff with full jitter, which statuses are worth retrying, and Retry-After.

Why not tenacity or backoff: what a library would replace is `backoff_delay`, one line
(tenacity's wait_random_exponential computes the same uniform draw). The retry loop itself
(calls.Caller.send) is not a plain "call until it works": a call cancelled because its
endpoint stalled is re-sent elsewhere without counting as an attempt, a failure marks the
endpoint down in the pool, a Retry-After longer than the backoff wins, and when nothing has
answered by the deadline the job stops instead of failing the record. Expressed through a
decorator's callbacks that logic would be harder to follow, and the rest of this module
(which statuses are transient, Retry-After parsing) is the kit's own policy that no library
has. Whose fault a failure is, and so whether it may end a record, is batch/outcome.py's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# 5xx that say "this server will never do that": retrying cannot help.
NEVER_RETRY = frozenset({501, 505})
# The longest a Retry-After header may hold one call back (a bad header must not park a job).
MAX_RETRY_AFTER = 300.0


def backoff_delay(
    attempt: int, base: float = 0.5, cap: float = 20.0, rng: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before retry number `attempt` (1-based): uniform in [0, min(cap, base*2^n)].

    Full jitter spreads 1,000 retrying calls over the window instead of re-sending them in
    one burst when a server comes back.
    """
    return rng() * min(cap, base * 2 ** (attempt - 1))


def is_retryable(status: int) -> bool:
    """429 and 5xx are transient; other 4xx are the record's own error, 501/505 permanent."""
    return status in RETRY_STATUS or (status >= 500 and status not in NEVER_RETRY)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header (delta seconds or an HTTP date) as seconds from now, capped.

    The server knows when it will have room again; waiting less only earns another 429.
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(MAX_RETRY_AFTER, max(0.0, seconds))
