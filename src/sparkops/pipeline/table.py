"""A pipeline job's results as a table: `results.csv`, one row per finished record.

results.jsonl keeps everything (each step's raw answer, tokens, the model that answered);
a researcher opens the CSV in a spreadsheet or pandas. Columns: `id`, `status`, `final`,
then per step of the pipeline, in order, its label (`<step>`), whether that label was read
from the answer (`<step>.parsed`: false means the answer could not be read and the step's
default route was taken), and the columns the step's kind adds (pipeline/kinds.py: one per
extracted field, `<step>.<field>`; a score step's `<step>.score`); `error` last. A step a
record never reached is empty. Rebuilt from results.jsonl at the end of every `batch run`, so
it always matches the journal: one row per
record, from the line the journal counts (its first: jobdir/lines.read_results), so a line
repeated by a crash between write and sync is not a second row.

A text cell that a spreadsheet would read as a formula (it starts with `=`, `+`, `-`, `@`, a
tab, a carriage return or a NUL: an id such as `=HYPERLINK(...)`, a model's answer) is written
with a single quote in front, as OWASP's CSV-injection guidance says, so it shows as text.
Numbers and booleans are written as they are (a negative number stays a number). Rows end in
CRLF (RFC 4180), so a cell holding a carriage return or a line feed is quoted whole.

Also here: how many answers could not be read, per step (what `batch run` says at the end).
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkops.files import write_atomic
from sparkops.jobdir import lines
from sparkops.pipeline.kinds import AnswerKind
from sparkops.pipeline.spec import PipelineSpec

TABLE = "results.csv"
# The first characters that make a spreadsheet read a cell as a formula (OWASP, "CSV
# Injection"; the NUL from OWASP ASVS 1.2.10), and what goes in front of them.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\0")
TEXT_MARK = "'"


def _lines(results: Path) -> Iterator[dict[str, Any]]:
    """Each record's results line, once: the line the journal counts (its first), complete
    JSON objects only (a torn tail or a damaged line is skipped, as every reader skips it)."""
    for obj, _ in lines.read_results(results, lines.ResultsDamage()):
        yield obj


def columns(spec: PipelineSpec) -> list[str]:
    """The CSV's header."""
    out = ["id", "status", "final"]
    for step in spec.steps:
        out += [step.name, f"{step.name}.parsed"]
        out += [f"{step.name}.{column}" for column in step.answer.columns()]
    return [*out, "error"]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return as_text(str(value))


def as_text(text: str) -> str:
    """`text` as a spreadsheet shows it: a single quote in front of one that starts like a
    formula (FORMULA_STARTS), so `=HYPERLINK(...)` is shown, never run."""
    return TEXT_MARK + text if text.startswith(FORMULA_STARTS) else text


def row(obj: dict[str, Any], spec: PipelineSpec) -> dict[str, str]:
    """One results line as a CSV row."""
    out = {"id": _cell(obj.get("id")), "status": _cell(obj.get("status"))}
    out["final"] = _cell(obj.get("final"))
    out["error"] = _cell(obj.get("error"))
    for entry in obj.get("steps") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), str):
            continue
        name = entry["step"]
        out[name] = _cell(entry.get("answer"))
        out[f"{name}.parsed"] = _cell(entry.get("parsed"))
        kind = _kind(spec, name)
        for key, value in (kind.cells(entry) if kind is not None else {}).items():
            out[f"{name}.{key}"] = _cell(value)
    return out


def _kind(spec: PipelineSpec, name: str) -> AnswerKind | None:
    """The answer kind of step `name` (None: a line from a step the pipeline no longer has)."""
    try:
        return spec.step(name).answer
    except KeyError:
        return None


def write_table(directory: Path, spec: PipelineSpec) -> Path:
    """Write `DIR/results.csv` (0600, replaced atomically) from `DIR/results.jsonl`."""
    header = columns(spec)
    buffer = io.StringIO()
    # rows end in CRLF (RFC 4180): the csv module quotes a cell holding any character of the
    # line end, so a carriage return inside an id stays in its cell, where with "\n" alone a
    # spreadsheet broke the row there (and could start the next one with `=`)
    writer = csv.DictWriter(buffer, fieldnames=header, extrasaction="ignore", lineterminator="\r\n")
    # the header is text too (a step or field name is the pipeline author's, cells the same)
    writer.writerow({name: as_text(name) for name in header})
    for obj in _lines(directory / "results.jsonl"):
        writer.writerow(row(obj, spec))
    path = directory / TABLE
    # an id with a lone surrogate (kept exactly in results.jsonl, JSON-escaped) reads as
    # its escape here: the CSV is UTF-8 text
    write_atomic(path, buffer.getvalue().encode("utf-8", "backslashreplace"))
    return path


def unparsed(results: Path) -> Counter[str]:
    """Per step, the answers that could not be read (their record took the default route)."""
    counts: Counter[str] = Counter()
    for obj in _lines(results):
        for entry in obj.get("steps") or []:
            if isinstance(entry, dict) and entry.get("parsed") is False:
                counts[str(entry.get("step"))] += 1
    return counts


def unparsed_line(directory: Path) -> str | None:
    """What `batch run` says when some answers could not be read (None: every one was)."""
    counts = unparsed(directory / "results.jsonl")
    if not counts:
        return None
    per = ", ".join(f"{step} {n}" for step, n in counts.most_common())
    return (
        f"{directory}: {sum(counts.values())} answer(s) could not be read and took their step's "
        f"default route ({per}); `parsed` is false for them in {TABLE} and results.jsonl"
    )
