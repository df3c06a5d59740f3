"""Build the chat messages for one step of one record.

Shared text first, record last: the system message is the step's fixed instructions,
byte-identical for every record, and the user message is the template filled from the
record. That order is what lets vLLM's prefix cache reuse the instructions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkops.pipeline.spec import FREE_TEXT_MAX_TOKENS, StepSpec


class RecordError(ValueError):
    """This record cannot be sent (missing field, ...): it becomes the record's error."""


def build_messages(step: StepSpec, record: Mapping[str, Any]) -> list[dict[str, str]]:
    """Messages for `step` over `record` (system, then user)."""
    fields = step.fields
    try:  # only the fields the template names: a record may carry many more
        values = {f: _text(record[f]) for f in fields}
    except KeyError:
        missing = [f for f in fields if f not in record]
        raise RecordError(
            f"record has no field(s) {missing} used by step {step.name!r}; "
            "add them to the input or change the step's user template"
        ) from None
    user = step.user.format_map(values)
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
) -> dict[str, Any]:
    """The /v1/chat/completions body for one call: `max_tokens` is the step's budget
    (pipeline/constrain.py derives it when the step sets none), `structured_outputs` the
    constraint the server holds the answer to (None: a free-text answer)."""
    body = {
        "model": model,
        "messages": build_messages(step, record),
        "max_tokens": max_tokens or step.max_tokens or FREE_TEXT_MAX_TOKENS,
        "temperature": step.temperature,
    }
    if structured_outputs is not None:
        body["structured_outputs"] = structured_outputs
    return body


def _text(value: Any) -> str:
    return "" if value is None else str(value)
