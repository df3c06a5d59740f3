"""One step's token sums over a job's answers: prompt tokens, those the server served from its
prefix cache, and those in whole shared blocks of the step's prefix (the most it could serve).

Shared by the report (report/steps.py: the hit rate and its ceiling per step) and the live
figures (jobdir/figures.py: the Prometheus gauges), so both sum the same way. Callers leave out
answers whose usage figures cannot be true before they add.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepTotals:
    """Streaming sums for one step over the journal."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    calls_with_cached: int = 0
    reusable_tokens: int = 0
    calls_with_reusable: int = 0

    def add(self, prompt: int, cached: int | None, reusable: int | None) -> None:
        """`reusable` is None when the step's prefix was not probed (no /tokenize at start)."""
        self.calls += 1
        self.prompt_tokens += prompt
        if cached is not None:
            self.cached_tokens += cached
            self.calls_with_cached += 1
        if reusable is not None:
            self.reusable_tokens += min(reusable, prompt)
            self.calls_with_reusable += 1

    @property
    def cached_known(self) -> bool:
        return self.calls > 0 and self.calls_with_cached == self.calls

    @property
    def ceiling_known(self) -> bool:
        return self.calls > 0 and self.calls_with_reusable == self.calls
