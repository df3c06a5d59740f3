"""What a step's answer is: the protocol every kind of answer implements.

A step answers one kind of thing: one of its choices (`parse:`, pipeline/parse.py), fields
held to a JSON Schema (`extract:`, pipeline/extract.py), or an integer score in a declared
range (`score:`, pipeline/score.py). Everything that depends on the kind asks the kind:
the labels `next` routes on, the server-side constraint, the answer budget, whether a held
answer is one the constraint allows, how an answer is read, and the results table's columns.
So the spec, the constraint, the client and the table never branch on which kind a step is,
and a new kind is one module and one entry in `StepSpec` (pipeline/spec.py), never a new arm
in each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# How a step's answers are held on the server: to a list of texts (vLLM's `choice`), to a
# JSON Schema (`json`), or not at all (`off`). Kept per step in the manifest.
Mode = Literal["choice", "json", "off"]

# What an unconstrained step may write when its YAML sets no max_tokens (room for a short
# sentence: a free-text answer names its choice somewhere in it).
FREE_TEXT_MAX_TOKENS = 16

# A text's token count (the server's tokenizer, or `byte_count`).
Count = Callable[[str], int]


def byte_count(text: str) -> int:
    """An upper bound of `text`'s token count without the tokenizer: every token of a
    byte-level or byte-fallback tokenizer covers at least one byte."""
    return len(text.encode("utf-8"))


@dataclass(frozen=True)
class Reading:
    """One answer, read: the label `next` routes on, whether it was read from the answer
    (False: the step's default, counted as unparsed), whether an answer stopped at max_tokens
    is nonetheless whole (`complete`), and what else the results line keeps for this kind
    (`fields` and `invalid` of an extraction, `score` of a score)."""

    label: str
    parsed: bool
    complete: bool = False
    entry: dict[str, Any] = field(default_factory=dict)


class AnswerKind(Protocol):
    """A kind of answer (see the module docstring); a step's `answer`."""

    @property
    def default(self) -> str:
        """The label of an answer that cannot be read."""
        ...

    @property
    def labels(self) -> list[str]:
        """Every label an answer can become, the default last (what `next` routes on)."""
        ...

    @property
    def held_mode(self) -> Mode:
        """The constraint this kind asks of the server when the step is held."""
        ...

    def constraint(self) -> dict[str, Any]:
        """The request's `structured_outputs` field when the step is held."""
        ...

    def budget_texts(self) -> list[str]:
        """The longest answers, whose token counts bound the budget (the server's tokenizer
        is asked for these); empty when the kind bounds no length."""
        ...

    def budget(self, count: Count, held: bool, step: str) -> int:
        """max_tokens when the step sets none (`count` a text's tokens); UserError with the
        fix when none can be derived (checked before a job runs)."""
        ...

    def problem(self, step: str, held: bool) -> str | None:
        """Why this step cannot run as written (one sentence with the fix), or None."""
        ...

    def holds(self, text: str, cut: bool) -> bool:
        """Whether a held answer is one its constraint allows (`cut`: stopped at
        max_tokens, so the start of an allowed answer is allowed too). An answer outside is
        proof the server did not hold the constraint: never a decision."""
        ...

    def read(self, text: str, held: bool, cut: bool) -> Reading:
        """The answer as a label (held: matched whole; free: read defensively)."""
        ...

    def columns(self) -> list[str]:
        """The results table's columns beyond `<step>` and `<step>.parsed`, as suffixes."""
        ...

    def cells(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A results-line step entry's values for `columns`."""
        ...
