"""Score steps: an integer in a declared range, held on the server, routed by bands.

A step may rate instead of choose (a 1-5 severity, a 0-10 pain score, a risk grade)::

    score:
      range: [1, 5]
      bands: {low: [1, 2], high: [3, 5]}    # optional: `next` routes on the band
      default: unclear
    next: {low: stop, high: detail, unclear: stop}

Held, the request carries vLLM's `choice` constraint over the range's numbers written out
(`"1"`, ..., `"5"`), so the answer is one of them; the answer is matched whole, and one cut off
at max_tokens that may be the start of a longer number ("1" of "10") is no decision.
Unconstrained, the first integer in the answer is read if it lies in the range. Without
`bands`, `next` routes on the numbers themselves (`"1"`, ... `"5"`). The results line keeps the
number (`score`), results.csv a `<step>.score` column.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkops.pipeline.kinds import FREE_TEXT_MAX_TOKENS, Count, Mode, Reading, byte_count

# The most numbers a range may hold: the constraint lists each one.
MAX_VALUES = 1000
_INTEGER = re.compile(r"(?<![\w.])-?\d+(?![\w.]*\d)")


class ScoreSpec(BaseModel):
    """An integer score in `range` (both ends included), routed by `bands` or by number."""

    model_config = ConfigDict(extra="forbid")

    range: tuple[int, int]
    bands: dict[str, tuple[int, int]] | None = Field(default=None, min_length=1)
    default: str = "unclear"

    @model_validator(mode="after")
    def _consistent(self) -> ScoreSpec:
        low, high = self.range
        if low > high:
            raise ValueError(f"range [{low}, {high}] is empty; write it as [lowest, highest]")
        if high - low + 1 > MAX_VALUES:
            raise ValueError(
                f"range [{low}, {high}] holds {high - low + 1:,} numbers; the constraint lists "
                f"each one, so keep it to {MAX_VALUES:,} or fewer"
            )
        if self.default.lstrip("-").isdigit():
            raise ValueError(f"default {self.default!r} is a number; pick a word, e.g. unclear")
        if self.bands is not None:
            self._check_bands(low, high)
        return self

    def _check_bands(self, low: int, high: int) -> None:
        assert self.bands is not None
        owner: dict[int, str] = {}
        for name, (start, end) in self.bands.items():
            if name == self.default:
                raise ValueError(f"band {name!r} is also the default; pick another default")
            if start > end or start < low or end > high:
                raise ValueError(
                    f"band {name!r} [{start}, {end}] is not within range [{low}, {high}]"
                )
            for value in range(start, end + 1):
                if value in owner:
                    raise ValueError(
                        f"bands {owner[value]!r} and {name!r} both hold {value}; a score "
                        "routes one way"
                    )
                owner[value] = name
        if missing := [v for v in range(low, high + 1) if v not in owner]:
            raise ValueError(
                f"scores {missing[:5]} are in no band; give every score in the range a band"
            )

    @property
    def values(self) -> list[str]:
        """The answers allowed, as the model writes them."""
        low, high = self.range
        return [str(v) for v in range(low, high + 1)]

    def label_of(self, score: int) -> str:
        """The label a score routes on: its band, or the number itself."""
        if self.bands is None:
            return str(score)
        return next(name for name, (a, b) in self.bands.items() if a <= score <= b)

    @property
    def labels(self) -> list[str]:
        named = list(self.bands) if self.bands is not None else self.values
        return [*named, self.default]

    # ---- the answer kind (pipeline/kinds.py) ------------------------------------------
    @property
    def held_mode(self) -> Mode:
        return "choice"

    def constraint(self) -> dict[str, Any]:
        return {"choice": self.values}

    def budget_texts(self) -> list[str]:
        return [max(self.values, key=len)]

    def budget(self, count: Count, held: bool, step: str) -> int:
        if not held:
            return FREE_TEXT_MAX_TOKENS
        return max(max(count(v), byte_count(v)) for v in self.budget_texts()) + 1

    def problem(self, step: str, held: bool) -> str | None:
        if held and self.range[0] == self.range[1]:
            return (
                f"step {step!r} scores in range {list(self.range)}, one number, and its answer "
                "is held to it, so every record would get it: widen the range"
            )
        return None

    def holds(self, text: str, cut: bool) -> bool:
        if text in self.values:
            return True
        return cut and bool(text) and any(v.startswith(text) for v in self.values)

    def read(self, text: str, held: bool, cut: bool) -> Reading:
        score = self._held(text, cut) if held else self._free(text)
        if score is None:
            return Reading(self.default, False, entry={"score": None})
        return Reading(self.label_of(score), True, complete=cut, entry={"score": score})

    def _held(self, text: str, cut: bool) -> int | None:
        """A whole allowed number; cut off, not one a longer number starts with."""
        if text not in self.values:
            return None
        if cut and any(v != text and v.startswith(text) for v in self.values):
            return None
        return int(text)

    def _free(self, text: str) -> int | None:
        """The first integer in a free answer, if it lies in the range ("4/5" reads 4)."""
        found = _INTEGER.search(text)
        if found is None:
            return None
        score = int(found.group(0))
        low, high = self.range
        return score if low <= score <= high else None

    def columns(self) -> list[str]:
        return ["score"]

    def cells(self, entry: dict[str, Any]) -> dict[str, Any]:
        return {"score": entry.get("score")}
