"""Open-file budget: a job with --concurrency N holds about N sockets at once.

Under a shell's usual `ulimit -n 1024`, --concurrency 1000 ran out of file descriptors only
after the records were done (the report's files could not be opened), so the job ended in
a traceback without a summary. At start the soft limit is raised to the hard one (any
process may do that), and a concurrency that still cannot fit is refused before any request,
naming both fixes.
"""

from __future__ import annotations

import os
import resource

from sparkops.errors import UserError

# Descriptors besides the call sockets: the journal and side files, the metrics sampler's
# connections (one per endpoint), the event loop, DNS, Python's own, with room to spare.
RESERVE = 64


def fd_shortfall(concurrency: int, endpoints: int, in_use: int, limit: int) -> int | None:
    """The limit the job needs when `limit` is too low for it, else None (pure, for tests)."""
    needed = concurrency + endpoints + in_use + RESERVE
    return needed if needed > limit else None


def ensure_open_files(concurrency: int, endpoints: int) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; refuse a concurrency that cannot fit.

    Returns the soft limit now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # keep the soft limit; the check below decides
    limit = soft if soft != resource.RLIM_INFINITY else 1 << 30
    needed = fd_shortfall(concurrency, endpoints, _fds_in_use(), limit)
    if needed is not None:
        fits = max(1, limit - (needed - concurrency))
        raise UserError(
            f"--concurrency {concurrency} needs about {needed} open files but this process "
            f"may open only {limit} (ulimit -n, hard limit); pass --concurrency {fits} or "
            f"less, or raise the limit (ulimit -Hn {needed} as root, or LimitNOFILE= for a "
            "service) (nothing was sent)"
        )
    return soft


def _fds_in_use() -> int:
    """Descriptors this process holds now (Linux /proc; a small guess elsewhere)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 16
