"""Streamed input readers: JSONL / CSV records with an id field, and OpenAI batch files.

Inputs can hold half a million records, so they are read line by line and never loaded
whole. A bad line (not JSON, no id) does not stop the job: it becomes an `InputProblem`
with its line number, which the journal writes as that record's error.

Files are read as "utf-8-sig": a byte-order mark (Excel and Notepad write one) is not part
of the first line, so record 1 is not an error and an OpenAI batch file is still one.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkops.errors import UserError

InputKind = Literal["jsonl", "csv", "openai"]


@dataclass(frozen=True, slots=True)
class Record:
    """One input record: its id, 1-based line number and fields (or OpenAI request)."""

    id: str
    line: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class InputProblem:
    """A line that cannot become a record; `id` is set when the line had one."""

    line: int
    message: str
    id: str | None = None


def detect_kind(path: Path) -> InputKind:
    """csv by extension; JSONL whose first object has custom_id+body is an OpenAI batch file."""
    if path.suffix.lower() == ".csv":
        return "csv"
    with path.open("r", encoding="utf-8-sig", errors="replace") as fh:
        for raw in fh:
            if raw.strip():
                try:
                    first = json.loads(raw)
                except ValueError:
                    return "jsonl"
                if isinstance(first, dict) and "custom_id" in first and "body" in first:
                    return "openai"
                return "jsonl"
    return "jsonl"


def read_records(
    path: Path, kind: InputKind, id_field: str = "id"
) -> Iterator[Record | InputProblem]:
    """Yield records (or problems) in file order, streaming."""
    if not path.is_file():
        raise UserError(f"input {path} does not exist; pass --input with a JSONL or CSV file")
    if kind == "csv":
        yield from _read_csv(path, id_field)
    else:
        yield from _read_jsonl(path, "custom_id" if kind == "openai" else id_field, kind)


def _read_jsonl(path: Path, id_field: str, kind: InputKind) -> Iterator[Record | InputProblem]:
    with path.open("r", encoding="utf-8-sig", errors="replace") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as err:
                yield InputProblem(n, f"line {n}: not valid JSON ({err.msg})")
                continue
            if not isinstance(obj, dict):
                yield InputProblem(n, f"line {n}: expected a JSON object")
                continue
            rid = obj.get(id_field)
            if rid is None or rid == "":
                yield InputProblem(n, f"line {n}: no {id_field!r} field; give every record an id")
                continue
            rid = str(rid)
            if kind == "openai":
                problem = _check_openai(obj, n)
                if problem:
                    yield InputProblem(n, problem, rid)
                    continue
            yield Record(rid, n, obj)


# What an OpenAI batch line may ask for (OpenAI's and `vllm run-batch`'s endpoints).
OPENAI_URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


def _check_openai(obj: dict[str, Any], n: int) -> str | None:
    if obj.get("method", "POST") != "POST":
        return f"line {n}: method must be POST"
    url = obj.get("url", "")
    if url not in OPENAI_URLS:
        return f"line {n}: url {url!r} not supported; use one of {', '.join(OPENAI_URLS)}"
    if not isinstance(obj.get("body"), dict):
        return f"line {n}: body must be a JSON object"
    if obj["body"].get("stream"):
        return f"line {n}: body.stream must be false in a batch file"
    return None


def _read_csv(path: Path, id_field: str) -> Iterator[Record | InputProblem]:
    with path.open("r", encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or id_field not in reader.fieldnames:
            raise UserError(
                f"CSV {path} has no {id_field!r} column (columns: {reader.fieldnames}); "
                "pass --id-field NAME"
            )
        for row in reader:
            n = reader.line_num
            if None in row:
                yield InputProblem(
                    n, f"line {n}: more values than header columns", row.get(id_field) or None
                )
                continue
            rid = row.get(id_field)
            if not rid:
                yield InputProblem(n, f"line {n}: empty {id_field!r}; give every record an id")
                continue
            yield Record(rid, n, dict(row))


@dataclass(frozen=True)
class InputScan:
    """What a first streaming pass learns: size, fingerprint, duplicates."""

    total: int
    fingerprint: str
    duplicates: list[tuple[str, int]]


def scan_input(path: Path, kind: InputKind, id_field: str) -> InputScan:
    """Count records, hash the file and find duplicate ids, in one streaming pass.

    Run before any request: a duplicated id would make "exactly once" ambiguous, so the
    job is refused up front rather than half-way through. Every id that can be read counts,
    including those of lines that will become record errors.
    """
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    seen: set[str] = set()
    dups: list[tuple[str, int]] = []
    total = 0
    for item in read_records(path, kind, id_field):
        total += 1
        # A malformed line that carries an id (a CSV row with an extra value, an OpenAI line
        # that fails validation) is journalled under that id, so it counts: left out, it
        # would make a real record with the same id look "already finished".
        if item.id is None:
            continue
        if item.id in seen:
            dups.append((item.id, item.line))
        else:
            seen.add(item.id)
    return InputScan(total, digest.hexdigest()[:16], dups)
