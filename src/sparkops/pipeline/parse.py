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
    if not text:
        return spec.default
    words = _WORD.findall(text.lower())
    lookup = {c.lower(): c for c in spec.choices}
    if words and words[0] in lookup:
        return lookup[words[0]]
    named = {lookup[w] for w in words if w in lookup}
    if len(named) == 1:
        return named.pop()
    return spec.default
