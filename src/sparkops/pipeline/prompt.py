"""Build the chat messages for one step of one record.

Shared text first, record last: the system message is the step's fixed instructions,
byte-identical for every record, and the user message is the template filled from the
record. That order is what lets vLLM's prefix cache reuse the instructions.

A request is built only from values the record really holds: a field the step's template
names that is missing, null, empty, a list or an object is the record's error, never sent; so
is a number (or true/false) in a field that the input's first record holds as text. Sent,
`"text": null` became "Note: " and `"text": 12345` "Note: 12345", and the model decided them
like any note; a number where the note should be is usually a shifted column. A field that
the first record holds as a number (`"age": 62`) is a number column: its numbers are sent
as JSON writes them (`62`, `true`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from sparkops.pipeline.spec import FREE_TEXT_MAX_TOKENS, StepSpec


class RecordError(ValueError):
    """This record cannot be sent (missing field, ...): it becomes the record's error."""


def build_messages(step: StepSpec, record: Mapping[str, Any]) -> list[dict[str, str]]:
    """Messages for `step` over `record` (system, then user). Values are written as they
    are (None as empty): the prefix probe (pipeline/check.py) fills every field with ""
    on purpose; a record's own values are checked by `build_request` (`check_fields`)."""
    _refuse_missing(step, record)
    # only the fields the template names: a record may carry many more
    user = step.user.format_map({f: _text(record[f]) for f in step.fields})
    messages = []
    if step.system:
        messages.append({"role": "system", "content": step.system})
    messages.append({"role": "user", "content": user})
    return messages


def build_request(
    step: StepSpec,
    model: str,
    record: Mapping[str, Any],
    max_tokens: int | None = None,
    structured_outputs: dict[str, Any] | None = None,
    numbers: Collection[str] = (),
) -> dict[str, Any]:
    """The /v1/chat/completions body for one call: `max_tokens` is the step's budget
    (pipeline/constrain.py derives it when the step sets none), `structured_outputs` the
    constraint the server holds the answer to (None: a free-text answer). RecordError when
    a field the step names is missing, empty or not text (`check_fields`; `numbers`: the
    fields the input's first record holds as numbers, where a number is a value)."""
    check_fields(step, record, numbers)
    body = {
        "model": model,
        "messages": build_messages(step, record),
        "max_tokens": max_tokens or step.max_tokens or FREE_TEXT_MAX_TOKENS,
        "temperature": step.temperature,
    }
    if structured_outputs is not None:
        body["structured_outputs"] = structured_outputs
    return body


def check_fields(step: StepSpec, record: Mapping[str, Any], numbers: Collection[str] = ()) -> None:
    """RecordError when a field `step`'s template names is missing from `record`, or holds
    nothing to send (see the module docstring). The message names the field and why, never
    its value: records are patient data."""
    _refuse_missing(step, record)
    for name in step.fields:
        if (why := _not_text(record[name], name in numbers)) is not None:
            raise RecordError(f"field {name!r} {why}")


def _refuse_missing(step: StepSpec, record: Mapping[str, Any]) -> None:
    missing = [f for f in step.fields if f not in record]
    if missing:
        raise RecordError(
            f"record has no field(s) {missing} used by step {step.name!r}; "
            "add them to the input or change the step's user template"
        )


def is_number(value: Any) -> bool:
    """A JSON number or true/false: what a number column holds."""
    return isinstance(value, int | float | bool)


def _not_text(value: Any, number_column: bool) -> str | None:
    """Why `value` is nothing to send (None when it is a non-blank string, or a number in a
    number column)."""
    if isinstance(value, str):
        return None if value.strip() else _EMPTY.format(what="empty")
    if value is None:
        return _EMPTY.format(what="empty (null)")
    if number_column and is_number(value):
        return None
    if isinstance(value, bool):
        return f"holds true/false, not text; not sent: {_CHECK}"
    if isinstance(value, int | float):
        return (
            "holds a number, not text; not sent: a number where text should be is usually "
            f"a shifted column, {_CHECK}"
        )
    kind = "a list" if isinstance(value, list) else "an object"
    return f"holds {kind}, not text; not sent: {_CHECK}"


_EMPTY = (
    "is {what}; not sent: a model given no text still answers, so give the record its "
    "text or leave it out of the input"
)
_CHECK = "check the input (write the value as a JSON string if it is meant)"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value) if is_number(value) else str(value)
