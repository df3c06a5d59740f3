"""Python's garbage collector, set for the length of a job: the start-up heap frozen, and
young collections far rarer.

Why: at 1,000 calls in flight each call keeps a few dozen container objects alive while it
waits (its task, coroutine frames, futures, aiohttp's request and response). CPython runs a
young collection every 700 allocations; those objects survive it, are promoted, and are
traversed again by every older collection, together with everything the imports and the
pre-flight left (modules, pydantic models). Measured with benchmarks/client_cost.py against a
local responder, 20,000 calls at 1,000 in flight (benchmarks/README.md): the collector was
about 40% of the client's CPU per call, for the kit and for a bare aiohttp loop alike (on
the H200's host, Python 3.12 against vLLM, the bare loop's share was 2 to 17%).

So, while the job runs: `gc.freeze()` moves what exists at its start into the permanent
generation, out of every later collection, and the young threshold rises to
`YOUNG_THRESHOLD` allocations, so most of a call's objects die by reference counting before a
collection looks at them. Cycles are still collected, only later (memory stays bounded: the
500,000-record run of benchmarks/memory_stream.py is measured with it). When the job ends
the previous thresholds come back and the frozen objects are unfrozen, so a program that
calls `run_job` (a notebook, `bench sweep`, the benchmarks) keeps its own settings. The same
pair of settings is a common one for busy asyncio servers.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Allocations between two young collections while a job runs (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


@contextlib.contextmanager
def tuned_for_job() -> Iterator[None]:
    """The collector set for a job (see the module docstring), restored on the way out."""
    before = gc.get_threshold()
    gc.collect()  # what is garbage already is freed, not frozen
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
