"""Turn a model's free-text answer into one of the step's labels.

Models add punctuation, capitals, preambles ("Answer: Yes."), and the kit's tiny test
model answers pure noise; so parsing is defensive and anything unrecognised maps to the
step's `default` label rather than failing the record.
"""

from __future__ import annotations

import re

from sparkops.pipeline.spec import ParseSpec

_WORD = re.compile(r"[a-z0-9_-]+")


def parse_answer(text: str | None, spec: ParseSpec) -> str:
    """The label for `text`: its first word if a choice, else the one choice named, else default."""
    return parse_label(text, spec)[0]


def parse_label(text: str | None, spec: ParseSpec) -> tuple[str, bool]:
    """The label for `text`, and whether it was read from the answer (False: the answer
    named no single choice, so the label is the default: counted as unparsed)."""
    if not text:
        return spec.default, False
    stripped = text.strip()
    if stripped in spec.choices:  # a constrained answer is exactly one choice
        return stripped, True
    words = _WORD.findall(text.lower())
    lookup = {c.lower(): c for c in spec.choices}
    if words and words[0] in lookup:
        return lookup[words[0]], True
    named = {lookup[w] for w in words if w in lookup}
    if len(named) == 1:
        return named.pop(), True
    return spec.default, False
