"""The hot-path JSON codec reads what json.loads reads, as json.loads reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkops import json_codec
from sparkops.batch.records import read_records

READ_THE_SAME = [
    '{"id": 123456789012345678901234567890, "text": "a"}',  # an id past 64 bits stays an int
    '{"id": "r1", "id": "r2"}',  # a repeated key: the last one, as json does
    '{"text": "caf\\u00e9 \\ud83d\\ude00", "n": -0, "f": 1e-7, "g": 2.5e16}',
    '{"lone": "\\ud800"}',  # a lone surrogate escape: msgspec refuses, json reads it
    '{"big": 1e400}',  # out of a double's range: inf, as json reads it
    '{"x": NaN}',
    '[1, {"a": [true, false, null]}]',
]


@pytest.mark.parametrize("text", READ_THE_SAME)
def test_decode_reads_what_json_loads_reads(text: str) -> None:
    want = json.loads(text)
    for raw in (text, text.encode()):
        got = json_codec.decode(raw)
        assert repr(got) == repr(want)  # repr: nan != nan, and int stays int, not 1.23e+29
        assert [type(v) for v in _leaves(got)] == [type(v) for v in _leaves(want)]


def test_invalid_json_raises_json_s_own_error_and_message() -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        json_codec.decode('{"id": "r1",')
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads('{"id": "r1",')
    assert ours.value.msg == theirs.value.msg


@pytest.mark.parametrize(
    "obj",
    [
        {"id": 123456789012345678901234567890, "text": "café 😀", "ok": True, "f": 0.1},
        {"lone": "\ud800", "id": "r1"},  # cannot be UTF-8: written with \u escapes
        [{"nested": {"k": [1, 2.5, None]}}],
    ],
)
def test_encode_reads_back_to_the_same_values(obj: object) -> None:
    raw = json_codec.encode(obj)
    raw.decode("utf-8")  # always valid UTF-8
    assert json.loads(raw) == obj


def test_encode_is_compact() -> None:
    assert json_codec.encode({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_a_record_id_past_64_bits_is_read_digit_for_digit(tmp_path: Path) -> None:
    records = tmp_path / "in.jsonl"
    records.write_text(
        '{"id": 123456789012345678901234567890, "text": "a"}\n{"id": "\\ud800", "text": "b"}\n'
    )
    got = list(read_records(records, "jsonl"))
    assert [r.id for r in got] == ["123456789012345678901234567890", "\ud800"]
