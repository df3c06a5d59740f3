"""Turn a model's answer into one of the step's labels: held answers whole, free text loosely.

Two readers, because the two kinds of answer prove different things:

- A **constrained** step's answer (pipeline/constrain.py) can only be one of the forms the
  kit allowed the server to write (each choice as written, lower, capitalised, upper case).
  It is matched whole, with Unicode case folding ("STRASSE" is `straße`), against exactly those
  forms. Anything else is proof the server did not hold the constraint (a router dropped the
  field, a restarted server without its grammar back end): it is never read as a decision,
  so "The answer is not yes." can never become `yes` (`read_held`).
- A **free-text** step's answer (`constrain: false`) is read defensively: models add
  punctuation, capitals and preambles ("Answer: Yes."). The answer's first words naming a
  choice win, else the one choice it names; the longest choice wins where one choice is
  part of another ("Not stroke" is `not stroke`, not `stroke`), and anything unclear maps to
  the step's `default` rather than failing the record (`parse_label`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sparkops.pipeline.kinds import FREE_TEXT_MAX_TOKENS, Count, Mode, Reading, byte_count

_WORD = re.compile(r"[\w-]+")


class ParseSpec(BaseModel):
    """A decision: one of `choices` (the `parse:` answer kind, pipeline/kinds.py)."""

    model_config = ConfigDict(extra="forbid")

    choices: list[str] = Field(min_length=1)
    default: str = "unclear"

    @field_validator("choices")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        """Choices whose allowed forms fold to one text would read as each other."""
        folded: dict[str, str] = {}
        for choice in v:
            if not choice.strip():
                raise ValueError("a choice is empty; give every choice a word")
            forms = {form.casefold() for form in allowed_answers([choice])}
            others = {folded.setdefault(form, choice) for form in forms} - {choice}
            other = others.pop() if others else choice
            if other != choice or v.count(choice) > 1:
                raise ValueError(
                    f"choices {other!r} and {choice!r} are the same answer once case is "
                    "ignored (the answer is matched without case); make them distinct"
                )
        return v

    @property
    def labels(self) -> list[str]:
        """Every label the parser can return (the choices, then the default)."""
        return [*self.choices, *([self.default] if self.default not in self.choices else [])]

    # ---- the answer kind (pipeline/kinds.py) ------------------------------------------
    @property
    def held_mode(self) -> Mode:
        return "choice"

    def constraint(self) -> dict[str, Any]:
        return {"choice": allowed_answers(self.choices)}

    def budget_texts(self) -> list[str]:
        return allowed_answers(self.choices)

    def budget(self, count: Count, held: bool, step: str) -> int:
        """Held: the longest allowed form in bytes (or tokens, if more) plus the end token: a
        grammar may spell a word in more tokens than the tokenizer's own split."""
        if not held:
            return FREE_TEXT_MAX_TOKENS
        return max(max(count(form), byte_count(form)) for form in allowed_answers(self.choices)) + 1

    def problem(self, step: str, held: bool) -> str | None:
        if held and len(self.choices) < 2:  # every answer would be that choice
            return (
                f"step {step!r} has one choice {self.choices}, and its answer is held to its "
                "choices, so every record would answer it: add the other answer(s), e.g. "
                "[yes, no] (or set constrain: false on the step)"
            )
        return None

    def holds(self, text: str, cut: bool) -> bool:
        if read_held(text, self) is not None:
            return True
        folded = text.casefold()
        return cut and bool(folded) and any(f.startswith(folded) for f in held_forms(self.choices))

    def read(self, text: str, held: bool, cut: bool) -> Reading:
        """Held: a whole allowed form; one cut off at max_tokens is complete unless it may be
        the start of a longer choice ("yes" of "yes, urgent"): then no decision. Free: the
        defensive reader."""
        if not held:
            label, parsed = parse_label(text, self)
            return Reading(label, parsed)
        choice = read_held(text, self)
        if choice is None or (cut and cut_prefix(text, self)):
            return Reading(self.default, False)
        return Reading(choice, True, complete=cut)

    def columns(self) -> list[str]:
        return []

    def cells(self, entry: dict[str, Any]) -> dict[str, Any]:
        return {}


def allowed_answers(choices: Sequence[str]) -> list[str]:
    """The texts a constrained choice step may write: each choice as written, lower case,
    capitalised and upper case. Both readers know them, and a prompt that says "Reply Yes or
    No" gets the words it asks for: held to lower case only, SmolLM2 answered "yes" to every
    screen note (specificity 42.9% -> 0% on 40 notes), its "No" masked away."""
    seen: dict[str, None] = {}
    for choice in choices:
        for text in (choice, choice.lower(), choice.capitalize(), choice.upper()):
            seen.setdefault(text, None)
    return list(seen)


def held_forms(choices: Sequence[str]) -> dict[str, str]:
    """Each allowed form, case-folded, mapped back to its one choice (`ParseSpec` refuses
    choices that fold to the same text, so no form maps to two)."""
    return {form.casefold(): choice for choice in choices for form in allowed_answers([choice])}


def read_held(text: str | None, spec: ParseSpec) -> str | None:
    """The choice a constrained answer is, matched whole; None when the answer is none of the
    allowed forms (the constraint did not hold: no decision)."""
    if text is None:
        return None
    return held_forms(spec.choices).get(text.casefold())


def cut_prefix(text: str, spec: ParseSpec) -> bool:
    """Whether a held answer cut off at max_tokens may be the start of a longer choice
    ("yes" of "yes, urgent"): then it is no decision, whichever choice it reads as."""
    folded = text.casefold()
    return any(form != folded and form.startswith(folded) for form in held_forms(spec.choices))


def parse_answer(text: str | None, spec: ParseSpec) -> str:
    """The label for a free-text answer (see `parse_label`)."""
    return parse_label(text, spec)[0]


def parse_label(text: str | None, spec: ParseSpec) -> tuple[str, bool]:
    """The label for a free-text answer, and whether it was read from the answer (False: the
    answer named no single choice, so the label is the default: counted as unparsed)."""
    if not text:
        return spec.default, False
    held = read_held(text.strip(), spec)
    if held is not None:
        return held, True
    words = _WORD.findall(text.casefold())
    found = _mentions(words, spec.choices)
    if not found:
        return spec.default, False
    first = [choice for start, _, choice in found if start == 0]
    if first:
        return first[0], True
    named = {choice for _, _, choice in found}
    if len(named) == 1:
        return named.pop(), True
    return spec.default, False


def _mentions(words: list[str], choices: Sequence[str]) -> list[tuple[int, int, str]]:
    """Where each choice's words occur in `words`, as (start, end, choice), the longest
    first, without a mention that lies inside a longer one ("stroke" in "not stroke")."""
    spans: list[tuple[int, int, str]] = []
    for choice in choices:
        want = _WORD.findall(choice.casefold())
        if not want:
            continue
        for start in range(len(words) - len(want) + 1):
            if words[start : start + len(want)] == want:
                spans.append((start, start + len(want), choice))
    spans.sort(key=lambda s: s[0] - s[1])  # longest first
    kept: list[tuple[int, int, str]] = []
    for start, end, choice in spans:
        if not any(s <= start and end <= e for s, e, _ in kept):
            kept.append((start, end, choice))
    return kept
