"""JSON on the batch client's hot path: msgspec's C codec, with the standard library behind it.

Every request is JSON three or four times over (its input line read for the pre-scan and for
the run, the request body, the answer, the journal line); with the standard library that was
about 40 us a request on a laptop core, a third of the kit's own cost over a bare aiohttp loop
(benchmarks/README.md). msgspec reads and writes the same values about ten times faster, and
keeps what matters here: integers of any size stay integers (orjson turns a 30-digit record id
into a float), keys keep their order, a repeated key keeps its last value.

What msgspec refuses, the standard library still does as before, so no input that read
yesterday is refused today and every error message is the one users already get: a lone
surrogate escape (``"\\ud800"``), a number out of a double's range (``1e400`` reads as inf),
``NaN``, and any invalid JSON (the fallback raises ``json.JSONDecodeError``). One difference
on output: a float NaN is written as ``null`` (valid JSON) where ``json.dumps`` wrote ``NaN``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def decode(raw: bytes | str) -> Any:
    """One JSON document as Python values, exactly as ``json.loads`` reads it."""
    try:
        return _decoder.decode(raw)
    except (msgspec.DecodeError, UnicodeError):
        return json.loads(raw)


def encode(obj: Any) -> bytes:
    """Compact UTF-8 JSON; text msgspec cannot write as UTF-8 (a lone surrogate) is written
    with ``\\u`` escapes instead, which reads back to the same string."""
    try:
        return _encoder.encode(obj)
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode("ascii")
