"""What an input file really is, when it is not what its name says: refused with the fix.

The kit reads JSONL and comma-separated CSV text, and tells them apart by the file's name.
A newcomer gives it other things: a gzip-compressed export, an Excel workbook, a JSONL file
named `.csv`, a CSV separated by semicolons (a European Excel) or tabs, a CSV without a
header row. Read as text, each of these failed with advice for another problem (the
cp1252/iconv hint, `--id-field`) and, worse, with the first record's text quoted back as
"columns": under the batch playbook that line goes to the journal. Records are patient data,
so these messages never quote a line of the file: they name the file's real format and the
fix, before any request.
"""

from __future__ import annotations

import csv
import re
import zipfile
from pathlib import Path

from sparkops.errors import UserError

_GZIP = b"\x1f\x8b"
_ZIP = b"PK\x03\x04"
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # Excel 97-2003 (.xls) and other old Office files
_EXCEL_FIX = (
    "open it in Excel and save it as 'CSV UTF-8 (Comma delimited) (*.csv)' (File > Save As), "
    "then pass that .csv"
)
# Delimiters a CSV saved by a spreadsheet may use instead of commas, and their names.
_DELIMITERS = {";": "semicolons (';')", "\t": "tabs", "|": "vertical bars ('|')"}
# A column name: starts with a letter or '_', a few words of letters, '_', '-', '/', '.', '#'
# and brackets; no digit (ids, numbers, dates carry digits) and no sentence punctuation.
_NAME = re.compile(r"[^\W\d]+(?:[ \-/.#()]+[^\W\d]+)*[ \-/.#()]*")  # [^\W\d] holds _
_NAME_WORDS = 4
_NAME_CHARS = 40


def refuse_binary(path: Path) -> None:
    """Refuse (UserError) a compressed file, an archive or a workbook, by its magic bytes,
    before it is decoded (decoded, its first byte failed as "not UTF-8, try cp1252")."""
    with path.open("rb") as fh:
        head = fh.read(8)
    if head.startswith(_GZIP):
        raise UserError(_gzip_message(path))
    if head.startswith(_ZIP):
        raise UserError(_zip_message(path))
    if head.startswith(_OLE2):
        raise UserError(
            f"{path} is an Excel 97-2003 workbook (.xls), not CSV text (nothing was sent); "
            f"{_EXCEL_FIX}"
        )


def _gzip_message(path: Path) -> str:
    name = path.name
    plain = (
        name[: -len(".gz")] if name.lower().endswith(".gz") else f"{path.stem}-plain{path.suffix}"
    )
    return (
        f"{path} is gzip-compressed, not text (nothing was sent); decompress it first: "
        f"gunzip -c {name} > {plain}, then pass --input {plain}"
    )


def _zip_message(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            mimetype = (
                archive.read("mimetype").decode("ascii", "replace") if "mimetype" in names else ""
            )
    except (zipfile.BadZipFile, OSError, KeyError):
        names, mimetype = set(), ""
    if {"xl/workbook.xml", "xl/workbook.bin"} & names:
        return f"{path} is an Excel workbook (.xlsx), not CSV text (nothing was sent); {_EXCEL_FIX}"
    if "spreadsheet" in mimetype:
        return (
            f"{path} is an OpenDocument spreadsheet (.ods), not CSV text (nothing was sent); "
            "save it as 'Text CSV' with character set UTF-8 and ',' as the field delimiter, "
            "then pass that .csv"
        )
    return (
        f"{path} is a zip archive, not text (nothing was sent); unzip it and pass the JSONL "
        "or CSV file it holds"
    )


def refuse_bad_header(path: Path, id_field: str, header: str, columns: list[str]) -> None:
    """Refuse (UserError) a CSV whose first line is not a header with an `id_field` column,
    naming what the line is instead: a JSON object (a JSONL file named .csv), a line
    separated by another delimiter, a record (no header row). A column list is shown only
    when every column looks like a name, never a line that looks like data."""
    if id_field in columns:
        return
    if header.lstrip().startswith("{"):
        raise UserError(
            f"{path} is JSON Lines, not CSV: its first line is a JSON object (nothing was "
            f"sent); rename it to {path.stem}.jsonl (a file named .csv is read as CSV)"
        )
    if (delimiter := _other_delimiter(header, len(columns))) is not None:
        raise UserError(_delimiter_message(path, delimiter))
    if same := [c for c in columns if c.strip().lower() == id_field.lower()]:
        raise UserError(
            f"CSV {path} has no {id_field!r} column but has {same[0]!r}; pass --id-field "
            f"{same[0]!r} (nothing was sent)"
        )
    if not any(c.strip() for c in columns):
        raise UserError(
            f"CSV {path} starts with an empty line (nothing was sent); the first line of a CSV "
            f"must name the columns, one of them {id_field!r}: remove the empty line"
        )
    if not all(looks_like_name(c) for c in columns):
        raise UserError(
            f"CSV {path} has no header row: its first line holds values (a number, an id, a "
            f"date or text), not column names, and no {id_field!r} column (nothing was "
            f"sent); the first line of a CSV must name the columns, one of them {id_field!r} "
            "(or pass --id-field NAME with the column that holds each record's id)"
        )
    raise UserError(
        f"CSV {path} has no {id_field!r} column (columns: {', '.join(columns)}); pass "
        "--id-field NAME with the column that holds each record's id (nothing was sent)"
    )


def looks_like_name(cell: str) -> bool:
    """Whether a header cell reads as a column name ("note_text", "Patient ID"), not a value
    (an id such as r17, a number, a date, a sentence): a few words, no digit."""
    cell = cell.strip()
    return (
        0 < len(cell) <= _NAME_CHARS
        and len(cell.split()) <= _NAME_WORDS
        and _NAME.fullmatch(cell) is not None
    )


def _other_delimiter(header: str, comma_columns: int) -> str | None:
    """The delimiter that splits the first line into more columns than commas do, if any."""
    counts = {d: len(next(csv.reader([header], delimiter=d), [])) for d in _DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] > max(comma_columns, 1) else None


def _delimiter_message(path: Path, delimiter: str) -> str:
    shown = "\\t" if delimiter == "\t" else delimiter
    convert = (
        'python3 -c "import csv, sys; csv.writer(sys.stdout).writerows('
        f"csv.reader(sys.stdin, delimiter='{shown}'))\" < {path.name} > {path.stem}-comma.csv"
    )
    return (
        f"CSV {path} is separated by {_DELIMITERS[delimiter]}, not commas (nothing was sent); "
        "the kit reads comma-separated CSV: save it again as 'CSV UTF-8 (Comma delimited)', "
        f"or convert it: {convert}"
    )
