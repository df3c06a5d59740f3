"""Streamed input readers: JSONL / CSV records with an id field, and OpenAI batch files.

Inputs can hold half a million records, so they are read line by line and never loaded
whole. A bad line (not JSON, no id) does not stop the job: it becomes an `InputProblem`
with its line number, which the journal writes as that record's error.

Files are read as bytes and decoded strictly (UTF-8 unless `--encoding` says otherwise): a
byte-order mark is not part of the first line, and a byte that is not in the encoding is one
line naming its place and the fix, before any request. A file that is not the text its
name says (gzip, a workbook, JSONL named .csv, another delimiter, no header row) is refused
naming what it is and the fix, never quoting a line (batch/input_format.py).
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparkops import json_codec
from sparkops.batch.input_format import refuse_bad_header, refuse_binary
from sparkops.errors import UserError

InputKind = Literal["jsonl", "csv", "openai"]
UTF8 = "utf-8"
_BOM = b"\xef\xbb\xbf"


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
    # "unreadable" (not JSON, not an object), "no-id", or "invalid" (the rest)
    reason: Literal["unreadable", "no-id", "invalid"] = "invalid"
    fields: tuple[str, ...] = ()  # a "no-id" line's field names, for the message


def detect_kind(path: Path, encoding: str = UTF8) -> InputKind:
    """csv by extension; JSONL whose first object has custom_id+body is an OpenAI batch file.
    A compressed file, an archive or a workbook is refused first (UserError)."""
    refuse_binary(path)
    if path.suffix.lower() == ".csv":
        return "csv"
    for _, raw in _lines(path, encoding):
        if raw.strip():
            try:
                first = json.loads(raw)
            except ValueError:
                return "jsonl"
            if isinstance(first, dict) and "custom_id" in first and "body" in first:
                return "openai"
            return "jsonl"
    return "jsonl"


def _lines(path: Path, encoding: str, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of `path`, decoded strictly, streaming.

    Decoded strictly so that a byte that is not `encoding` stops the job before any request,
    naming its line and offset (never U+FFFD in an id or a prompt), and read up to `limit`
    bytes: the size the job recorded, so lines appended while it runs are not read (the job
    notices the change and stops, batch/job.py), and half a line left by a truncation is not
    a record. Lines end at \n, \r\n or a lone \r (Excel's Macintosh CSV), as Python's
    universal newlines split them; a UTF-8 byte-order mark is not part of line 1. The
    decoding and splitting run in C (TextIOWrapper); only an error is located byte by byte.
    """
    codec = "utf-8-sig" if encoding == UTF8 else encoding
    with path.open("rb", buffering=0) as raw:
        bounded = _Bounded(raw, limit)
        text = io.TextIOWrapper(io.BufferedReader(bounded, 1 << 16), codec, newline="")
        try:
            for n, line in enumerate(text, start=1):
                if bounded.short and not line.endswith(("\n", "\r")):
                    return  # the file shrank under the job: half a line is not a record
                yield n, line
        except UnicodeError:  # UnicodeDecodeError, or UTF-16's "does not start with BOM"
            raise UserError(_where_undecodable(path, encoding)) from None


class _Bounded(io.RawIOBase):
    """A raw reader that stops at `limit` bytes, and notes (`short`) a file that ended first."""

    def __init__(self, raw: Any, limit: int | None) -> None:
        self.raw = raw
        self.left = limit
        self.short = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if self.left is not None:
            if self.left <= 0:
                return 0
            view = view[: self.left]
        n = self.raw.readinto(view) or 0
        if n == 0 and self.left is not None:
            self.short = True
        if self.left is not None:
            self.left -= n
        return n


def _where_undecodable(path: Path, encoding: str) -> str:
    """The message for the first byte of `path` that `encoding` cannot decode."""
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = 0  # bytes of the file before `raw`
    line = 1  # the text's line `raw` starts in (counted in decoded text: UTF-16's \n is 2 bytes)
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            skip = 3 if n == 1 and encoding == UTF8 and raw.startswith(_BOM) else 0
            state = decoder.getstate()
            held = state[0]  # bytes of a character begun in the chunk before
            try:
                text = decoder.decode(raw[skip:])
            except UnicodeDecodeError as err:
                at = offset + skip - len(held) + err.start
                byte = (held + raw[skip:])[err.start]
                valid = codecs.getincrementaldecoder(encoding)()  # the text before the error
                valid.setstate(state)
                line += valid.decode(raw[skip:][: max(0, err.start - len(held))]).count("\n")
                return _encoding_message(path, line, at, byte, encoding)
            except UnicodeError as err:  # a codec's own refusal (UTF-16 without a BOM)
                return _stream_message(path, line, offset, str(err), encoding, bom=True)
            line += text.count("\n")
            offset += len(raw)
        try:
            decoder.decode(b"", final=True)
        except UnicodeError:
            held = decoder.getstate()[0]
            return _stream_message(
                path, line, offset - len(held), "the file ends inside a character", encoding
            )
    return f"{path} is not {encoding} text (nothing was sent); pass the --encoding it was saved in"


def _stream_message(
    path: Path, line: int, offset: int, why: str, encoding: str, bom: bool = False
) -> str:
    """A decoding failure that is not one bad byte (no byte-order mark, a cut character)."""
    hint = (
        " (UTF-16 without a byte-order mark: --encoding utf-16-le or utf-16-be)"
        if bom and codecs.lookup(encoding).name.startswith("utf-16")
        else ""
    )
    return (
        f"{path} is not {encoding}: line {line}, byte offset {offset}: {why} (nothing was "
        f"sent); pass the --encoding it was saved in{hint}"
    )


def _encoding_message(path: Path, line: int, offset: int, byte: int, encoding: str) -> str:
    if encoding == UTF8:
        return (
            f"{path} is not UTF-8: line {line}, byte offset {offset} (0x{byte:02x}) is not valid "
            "UTF-8 (nothing was sent); if Excel or Windows saved it, pass --encoding cp1252 "
            f"(or the encoding it was saved in), or convert it: iconv -f cp1252 -t utf-8 "
            f"{path.name} > {path.stem}.utf8{path.suffix}"
        )
    return (
        f"{path} is not {encoding}: line {line}, byte offset {offset} (0x{byte:02x}) has no "
        "character in that encoding (nothing was sent); pass the --encoding it was saved in"
    )


def check_encoding(encoding: str) -> str:
    """The codec name for --encoding, or one line naming the fix."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise UserError(
            f"unknown --encoding {encoding!r}; use a Python codec name such as utf-8 or cp1252"
        ) from None


def read_records(
    path: Path,
    kind: InputKind,
    id_field: str = "id",
    encoding: str = UTF8,
    limit: int | None = None,
) -> Iterator[Record | InputProblem]:
    """Yield records (or problems) in file order, streaming (`limit`: bytes to read)."""
    if not path.is_file():
        raise UserError(f"input {path} does not exist; pass --input with a JSONL or CSV file")
    refuse_binary(path)
    lines = _lines(path, encoding, limit)
    if kind == "csv":
        yield from _read_csv(path, id_field, lines)
    else:
        yield from _read_jsonl(path, "custom_id" if kind == "openai" else id_field, kind, lines)


def _read_jsonl(
    path: Path, id_field: str, kind: InputKind, lines: Iterator[tuple[int, str]]
) -> Iterator[Record | InputProblem]:
    for n, raw in lines:
        if not raw.strip():
            continue
        try:
            obj = json_codec.decode(raw)
        except json.JSONDecodeError as err:
            yield InputProblem(n, f"line {n}: not valid JSON ({err.msg})", reason="unreadable")
            continue
        if not isinstance(obj, dict):
            yield InputProblem(n, f"line {n}: expected a JSON object", reason="unreadable")
            continue
        rid = obj.get(id_field)
        if rid is None or rid == "":
            fix = (
                "give every record an id"
                if kind == "openai"
                else "give every record an id, or pass --id-field NAME"
            )
            yield InputProblem(
                n, f"line {n}: no {id_field!r} field; {fix}", reason="no-id", fields=tuple(obj)
            )
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


def _read_csv(
    path: Path, id_field: str, lines: Iterator[tuple[int, str]]
) -> Iterator[Record | InputProblem]:
    first: list[str] = []  # the header's text, for refuse_bad_header

    def texts() -> Iterator[str]:
        for _, text in lines:
            if not first:
                first.append(text)
            yield text

    reader = csv.DictReader(texts())
    if reader.fieldnames is None:
        raise UserError(
            f"CSV {path} is empty (no header row); pass a CSV with a header and records"
        )
    refuse_bad_header(path, id_field, first[0], list(reader.fieldnames))
    for row in reader:
        n = reader.line_num
        if None in row:
            yield InputProblem(
                n, f"line {n}: more values than header columns", row.get(id_field) or None
            )
            continue
        rid = row.get(id_field)
        if not rid:
            yield InputProblem(
                n, f"line {n}: empty {id_field!r}; give every record an id", reason="no-id"
            )
            continue
        yield Record(rid, n, dict(row))


@dataclass(frozen=True)
class InputStamp:
    """What the job read: the input's size, modification time and inode. The input is fixed
    for a run: a change under it (lines appended, truncated, emptied, replaced) stops the
    job, and a resume on a changed input is refused (the fingerprint differs)."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> InputStamp:
        st = path.stat()
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)

    def change(self, path: Path) -> str | None:
        """How `path` differs from this stamp ("input X grew ..."), or None."""
        try:
            now = InputStamp.of(path)
        except OSError:
            return f"input {path} was deleted or moved"
        if now == self:
            return None
        if now.inode != self.inode:
            what = "was replaced by another file"
        elif now.size > self.size:
            what = f"grew from {self.size} to {now.size} bytes (lines appended)"
        elif now.size < self.size:
            what = f"shrank from {self.size} to {now.size} bytes (truncated or emptied)"
        else:
            what = "was rewritten (same size, new modification time)"
        return f"input {path} {what}"


@dataclass(frozen=True)
class InputScan:
    """What a first streaming pass learns: size, fingerprint, duplicates, missing ids."""

    total: int
    fingerprint: str
    duplicates: list[tuple[str, int]]
    stamp: InputStamp
    no_id: list[int] = field(default_factory=list)  # lines without a readable id
    unreadable: list[int] = field(default_factory=list)  # lines that are not a JSON object
    first_fields: list[str] | None = None  # the first record's field names, for the message


def scan_input(path: Path, kind: InputKind, id_field: str, encoding: str = UTF8) -> InputScan:
    """Count records, hash the file and find duplicate ids, in one streaming pass.

    Run before any request: a duplicated id would make "exactly once" ambiguous, so the
    job is refused up front rather than half-way through. Every id that can be read counts,
    including those of lines that will become record errors. The stamp is taken before and
    after: a file still being written is refused rather than half read.
    """
    stamp = InputStamp.of(path)
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        left = stamp.size
        while left > 0 and (chunk := fh.read(min(1 << 20, left))):
            digest.update(chunk)
            left -= len(chunk)
    seen: set[str] = set()
    dups: list[tuple[str, int]] = []
    no_id: list[int] = []
    unreadable: list[int] = []
    first_fields: list[str] | None = None
    total = 0
    for item in read_records(path, kind, id_field, encoding, stamp.size):
        total += 1
        if first_fields is None and (isinstance(item, Record) or item.fields):
            first_fields = list(item.fields)
        # A malformed line that carries an id (a CSV row with an extra value, an OpenAI line
        # that fails validation) is journalled under that id, so it counts: left out, it
        # would make a real record with the same id look "already finished".
        rid = item.id
        if rid is None:
            missing = isinstance(item, InputProblem) and item.reason == "no-id"
            (no_id if missing else unreadable).append(item.line)
            continue
        if rid in seen:
            dups.append((rid, item.line))
        else:
            seen.add(rid)
    if (change := stamp.change(path)) is not None:
        raise UserError(
            f"{change} while it was read; run again once the file is complete (nothing was sent)"
        )
    return InputScan(total, digest.hexdigest()[:16], dups, stamp, no_id, unreadable, first_fields)


def refuse_bad_input(scan: InputScan, path: Path, kind: InputKind, id_field: str) -> None:
    """Refuse, before any request, an input whose records cannot each be journalled once:
    no records, duplicate ids, an OpenAI batch line without a custom_id or unreadable (its
    output line would need `custom_id: null`, which OpenAI's and vLLM's schemas reject), a
    JSONL file none of whose lines is a JSON object (another format: a CSV named .jsonl), or
    ids missing from half the records or more (the wrong --id-field, not bad records)."""
    if scan.total == 0:
        raise UserError(f"input {path} holds no records (it is empty); pass a file with records")
    if scan.duplicates:
        shown = ", ".join(f"{rid!r} (line {line})" for rid, line in scan.duplicates[:5])
        raise UserError(
            f"{len(scan.duplicates)} duplicate id(s) in {path}: {shown}; make every "
            f"{'custom_id' if kind == 'openai' else id_field!r} unique (nothing was sent)"
        )
    if kind == "openai" and (bad := sorted(scan.no_id + scan.unreadable)):
        shown = ", ".join(str(n) for n in bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise UserError(
            f"{len(bad)} line(s) of the OpenAI batch file {path} have no custom_id or are not "
            f"a JSON object (line {shown}); fix or remove them (nothing was sent)"
        )
    if kind == "jsonl" and len(scan.unreadable) == scan.total:
        raise UserError(
            f"{path} is not JSON Lines: none of its {scan.total} line(s) is a JSON object "
            "(nothing was sent); JSONL holds one JSON object per line (if the file is a CSV, "
            "name it .csv)"
        )
    if kind != "openai" and scan.no_id and 2 * len(scan.no_id) >= scan.total:
        fields = ", ".join(scan.first_fields or []) or "none"
        raise UserError(
            f"{len(scan.no_id)} of {scan.total} records in {path} have no {id_field!r} "
            f"(first: line {scan.no_id[0]}; a record's fields: {fields}); pass --id-field "
            "NAME with the field that holds each record's id (nothing was sent)"
        )


@dataclass(frozen=True)
class InputSource:
    """The job's input, scanned and checked once (`scan`), then read as the run needs it:
    its records, its first record, and whether it changed under the run.

    Why an owner: the job reads one file several times (the scan, the first record, the
    run, the change checks) and every read must agree on the kind, the id field, the
    encoding and the size the scan saw (a line appended later is no record of this job)."""

    path: Path
    kind: InputKind
    id_field: str
    encoding: str
    scan_result: InputScan

    @classmethod
    def scan(cls, path: Path, kind: InputKind, id_field: str, encoding: str = UTF8) -> InputSource:
        """Scan the input and refuse one whose records cannot each be journalled once
        (UserError, before any request; see `scan_input` and `refuse_bad_input`)."""
        found = scan_input(path, kind, id_field, encoding)
        refuse_bad_input(found, path, kind, id_field)
        return cls(path, kind, id_field, encoding, found)

    @property
    def total(self) -> int:
        return self.scan_result.total

    @property
    def stamp(self) -> InputStamp:
        return self.scan_result.stamp

    def records(self) -> Iterator[Record | InputProblem]:
        """Every record (or input problem) of the bytes the scan read, streamed."""
        return read_records(self.path, self.kind, self.id_field, self.encoding, self.stamp.size)

    def first_record(self) -> Record | None:
        """The first line that is a record (None when every line is an input problem)."""
        return next((item for item in self.records() if isinstance(item, Record)), None)

    def changed(self) -> str | None:
        """How the input differs from what the scan read ("input X grew ..."), or None."""
        return self.stamp.change(self.path)
