"""How the job folder's readers take a field from a JSON line: leniently, as the files outlive
the client that wrote them (a field of the wrong type reads as absent, never as a crash)."""

from __future__ import annotations

from typing import Any


def int_or_zero(value: Any) -> int:
    """An integer field, 0 when absent or of another type (a bool is not a number here)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def number_or_none(value: Any) -> float | None:
    """A numeric field, None when absent or of another type (a bool is not a number here)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def text_or_none(value: Any) -> str | None:
    """A text field, None when absent or of another type."""
    return value if isinstance(value, str) else None
