"""Answers cut off by `max_tokens`: counted per step while the job runs, said once per step.

A model stopped by a step's `max_tokens` (`finish_reason: "length"`) gives a partial answer
that the step still parses, usually to its default, and the record is "done": the results
look fine while the decisions are not the model's. Each step of a results line keeps its
`finish_reason`; `batch status` and the report count the cut answers from there; while the
job runs this warns once per step when its share of cut answers passes `WARN_SHARE`, with
the fix. Pure counting: the job gives it the step entries of each finished record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sparkops.jobdir.lines import cut_off

# Warn once a step's answers are cut off this often ...
WARN_SHARE = 0.1
# ... over at least this many of its answers (one cut answer in three is no trend yet).
WARN_AFTER = 10


def cut_message(step: str, cut: int, answers: int) -> str:
    """The one warning line for a step whose answers are being cut off."""
    return (
        f"step {step!r}: {cut:,} of {answers:,} answers so far were cut off at its max_tokens "
        '(finish_reason "length"), so their decisions are partial answers or the step\'s '
        "default; raise the step's max_tokens in the pipeline (results.jsonl keeps "
        "finish_reason per step; `sparkops batch status` counts them)"
    )


@dataclass
class Truncation:
    """Per-step counts of answers and of those cut off; `on_warning` gets each warning."""

    on_warning: Callable[[str], None] | None = None
    answers: Counter[str] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)

    def count(self, steps: Iterable[dict[str, Any]]) -> None:
        """The step entries of one finished record."""
        for entry in steps:
            step = str(entry.get("step"))
            self.answers[step] += 1
            if not cut_off(entry):
                continue
            self.cut[step] += 1
            answers, cut = self.answers[step], self.cut[step]
            if step in self.warned or answers < WARN_AFTER or cut < WARN_SHARE * answers:
                continue
            self.warned.add(step)
            if self.on_warning is not None:
                self.on_warning(cut_message(step, cut, answers))
