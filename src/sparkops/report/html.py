"""`sparkops report DIR --html`: the report as one self-contained HTML file (DIR/report.html).

Where people would rather look than read: the run's timeline (records/min and the prefix-cache
hit rate: the throughput plot report.md links; calls in flight, running and waiting requests,
KV cache use; each step's hit rate against its ceiling over time), the figures, the bottleneck
sentence, the decisions, errors by cause, answers cut off, the serving record and its changes,
stalls, the host while the job ran (host.jsonl: memory, fragmentation, GPU driver errors,
restarts, disk; report/host.py) and, for a concurrency sweep, its levels. The plots it adds
to report.md's are drawn in report/html_plots.py and report/host.py.

One file, nothing fetched at view time: the plots are PNGs inside it (data: URLs), the style
is inline, there is no script, and a Content-Security-Policy forbids every other source, so
it opens the same from a laptop, an e-mail or an archive with no network. Written 0600 like
every other file of the job folder (sparkops.files).

What it shows comes from the typed report (jobdir/job_report.JobReport, computed by
report/compute.py exactly as report.json is) and the job folder's own files through the
readers' handle (jobdir/reader.JobFolder). No record text or id: errors are grouped by the
failure's kind and HTTP status with the kit's own words for the cause, never the server's
message (a 422 can quote the request).
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from sparkops import __version__
from sparkops.files import write_atomic
from sparkops.jobdir import lines
from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import is_job_dir
from sparkops.jobdir.job_report import JobReport
from sparkops.jobdir.reader import JobFolder
from sparkops.report import host as report_host
from sparkops.report import serving as report_serving
from sparkops.report import stalls
from sparkops.report.compute import JobData, compute_report, job_origin, load_dir
from sparkops.report.html_plots import load_figure, png, step_figure, step_hit_series
from sparkops.report.render import ROWS, figure

REPORT_HTML = "report.html"
# A concurrency sweep's table and plots (bench/runner.py writes them; bench sits above report,
# so the names are spelt here).
SWEEP_JSON = "sweep.json"
SWEEP_PLOTS = ("records_per_min.png", "hit_rate.png", "decode_ceiling.png")
# A failure kind whose cause is the server's message (it can quote the request): shown as its
# HTTP status only.
_SERVERS_WORDS = "http_status"


@dataclass(frozen=True)
class Cell:
    text: str
    numeric: bool = False


@dataclass(frozen=True)
class Table:
    caption: str
    head: tuple[str, ...]
    rows: Sequence[tuple[Cell, ...]]


@dataclass(frozen=True)
class Paragraph:
    text: str
    kind: str = "note"  # "note" or "warn"


@dataclass(frozen=True)
class Image:
    alt: str
    png: str  # base64


@dataclass
class Section:
    id: str
    title: str
    paragraphs: list[Paragraph] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)


def write_html(directory: Path) -> Path:
    """Write DIR/report.html for a job folder, or a sweep folder (its levels only); returns
    its path. A folder that is neither is refused by the job folder's reader (the fix named)."""
    sections = (
        job_sections(directory)
        if is_job_dir(directory) or not (directory / SWEEP_JSON).is_file()
        else []
    )
    sweep = sweep_section(directory)
    if sweep is not None:
        sections.append(sweep)
    path = directory / REPORT_HTML
    write_atomic(path, page(directory.resolve().name, sections))
    return path


def page(name: str, sections: Sequence[Section]) -> str:
    """The whole document (jinja2, every value escaped)."""
    source = resources.files("sparkops.report").joinpath("report.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(source).render(
        name=name,
        written=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        version=__version__,
        sections=sections,
    )


def job_sections(directory: Path) -> list[Section]:
    """Every section of a job's page, in reading order."""
    data = load_dir(directory)
    report = compute_report(data)
    folder = JobFolder(directory)
    return [
        figures_section(report),
        timeline_section(data, report, folder),
        bottleneck_section(report),
        decisions_section(report),
        errors_section(folder),
        truncated_section(report),
        steps_section(report),
        serving_section(report),
        host_section(report),
    ]


# ---- sections ---------------------------------------------------------------------------------
def figures_section(report: JobReport) -> Section:
    rows = []
    for label, fmt, figure_of in ROWS:
        value = figure_of(report)
        rows.append((Cell(label), Cell("-" if value is None else fmt.format(value), True)))
    return Section(
        "figures", "Figures", tables=[Table("The job's figures", ("Figure", "Value"), rows)]
    )


def timeline_section(data: JobData, report: JobReport, folder: JobFolder) -> Section:
    section = Section("timeline", "Timeline")
    section.images.append(Image("records/min and prefix cache hit rate", png(figure(data))))
    if data.samples:
        section.images.append(
            Image("calls in flight, requests and KV cache", png(load_figure(data.samples)))
        )
    else:
        section.paragraphs.append(
            Paragraph(
                "No /metrics samples (timeline.jsonl): calls in flight, requests and KV cache "
                "are not plotted."
            )
        )
    ceilings = {r.step: r.ceiling for r in report.steps}
    buckets = step_hit_series(_timings(folder))
    if buckets:
        section.images.append(
            Image("each step's hit rate against its ceiling", png(step_figure(buckets, ceilings)))
        )
    else:
        section.paragraphs.append(
            Paragraph("No answer reported its cached tokens: no hit rate per step over time.")
        )
    if data.host_readings:  # the host beside the job's timeline (report/host.py)
        origin = job_origin(data) or data.host_readings[0].t
        section.images.append(
            Image(
                "the host's free memory and disk",
                png(report_host.host_figure(data.host_readings, origin)),
            )
        )
    return section


def bottleneck_section(report: JobReport) -> Section:
    section = Section("bottleneck", "Bottleneck")
    if report.bottleneck_sentence:
        section.paragraphs.append(Paragraph(f"{report.bottleneck}: {report.bottleneck_sentence}."))
    else:
        section.paragraphs.append(
            Paragraph("Not named: the job has no steady window to judge it by.")
        )
    section.paragraphs += [
        Paragraph(stalls.sentence(row), "warn") for row in report.stalled_endpoints
    ]
    return section


def decisions_section(report: JobReport) -> Section:
    section = Section("decisions", "Decisions")
    done = sum(report.finals.values())
    if not done:
        section.paragraphs.append(Paragraph("No done record has a decision."))
        return section
    rows = [
        (Cell(label), Cell(f"{n:,}", True), Cell(f"{n / done:.1%}", True))
        for label, n in sorted(report.finals.items(), key=lambda item: (-item[1], item[0]))
    ]
    section.tables.append(
        Table("The final label of each done record", ("Decision", "Records", "Share"), rows)
    )
    return section


def errors_section(folder: JobFolder) -> Section:
    section = Section("errors", "Errors by cause")
    causes = error_causes(folder)
    if not causes:
        section.paragraphs.append(Paragraph("No record ended in error."))
        return section
    rows = [
        (Cell(kind), Cell(cause), Cell(f"{n:,}", True))
        for (kind, cause), n in sorted(causes.items(), key=lambda item: (-item[1], item[0]))
    ]
    section.tables.append(
        Table("Records ended by their own error", ("Kind", "Cause", "Records"), rows)
    )
    section.paragraphs.append(
        Paragraph(
            "An HTTP error is shown by its status: the server's own message (which can quote the "
            "request) stays in results.jsonl. `sparkops batch run ... --retry-errors` sends "
            "them again."
        )
    )
    return section


def truncated_section(report: JobReport) -> Section:
    section = Section("truncated", "Answers cut off")
    if not report.truncated_answers:
        section.paragraphs.append(Paragraph("No answer was cut off at its step's max_tokens."))
        return section
    rows = [
        (Cell(step), Cell(f"{t.cut:,}", True), Cell(f"{t.answers:,}", True))
        for step, t in report.truncated_answers.items()
    ]
    section.tables.append(
        Table('finish_reason "length" per step', ("Step", "Cut off", "Answers"), rows)
    )
    section.paragraphs.append(
        Paragraph(
            "Their decisions are partial answers or the step's default: raise the step's "
            "max_tokens.",
            "warn",
        )
    )
    return section


def steps_section(report: JobReport) -> Section:
    section = Section("steps", "Prefix cache per step")
    if not report.steps:
        section.paragraphs.append(Paragraph("No step reported prompt tokens."))
        return section

    def pct(x: float | None) -> Cell:
        return Cell("-" if x is None else f"{x:.1%}", True)

    rows = [
        (
            Cell(r.step),
            Cell(f"{r.calls:,}", True),
            Cell(f"{r.prompt_tokens:,}", True),
            pct(r.hit_rate),
            pct(r.ceiling),
        )
        for r in report.steps
    ]
    section.tables.append(
        Table("Hit rate from the answers' cached tokens; ceiling from the prompts",
              ("Step", "Calls", "Prompt tokens", "Hit rate", "Ceiling"), rows)
    )  # fmt: skip
    section.paragraphs += [Paragraph(r.verdict) for r in report.steps]
    if report.hit_rate_verdict:
        section.paragraphs.append(Paragraph(report.hit_rate_verdict))
    return section


def serving_section(report: JobReport) -> Section:
    section = Section("serving", "Serving record")
    summary = report.serving
    if summary is None:
        section.paragraphs.append(Paragraph("No serving record (a job from before serving.jsonl)."))
        return section
    if summary.changes:
        section.paragraphs.append(
            Paragraph(f"The serving setup changed {len(summary.changes)} time(s) during the job: "
                      "figures that mix the setups mix two experiments.", "warn")
        )  # fmt: skip
        section.paragraphs += [Paragraph(report_serving.change_text(c)) for c in summary.changes]
    else:
        section.paragraphs.append(Paragraph("The serving setup did not change during the job."))
    for base, ident in summary.endpoints.items():
        section.tables.append(
            Table(f"Endpoint {base} at the start", ("Field", "Value"), _identity_rows(ident))
        )
    facts = [
        ("Kit version", str(summary.kit_version)),
        ("Pipeline fingerprint", str(summary.pipeline_fingerprint)),
        ("Input fingerprint", str(summary.input_fingerprint)),
        ("GPU", report_serving.gpu_text(summary.gpu)),
        ("Stack", report_serving.stack_text(summary.stack)),
    ]
    if summary.kit_versions:
        facts.append(("Kit versions over the runs", ", ".join(summary.kit_versions)))
    facts += [
        (f"Records finished in serving epoch {k}", f"{n:,}")
        for k, n in summary.records_by_serving.items()
    ]
    section.tables.append(
        Table("The job's setup", ("", ""), [(Cell(k), Cell(v)) for k, v in facts])
    )
    if text := report_serving.capacity_text(summary.capacity):
        section.paragraphs.append(Paragraph(text.removeprefix("- ")))
    return section


def host_section(report: JobReport) -> Section:
    """The host while the job ran (host.jsonl, report/host.py): free memory, fragmentation,
    the GPU driver's errors, container and server restarts, disk."""
    section = Section("host", "Host")
    summary = report.host
    if summary is None:
        section.paragraphs.append(Paragraph("No host readings (a job from before host.jsonl)."))
        return section
    section.paragraphs += [
        Paragraph(text, "warn" if warns else "note")
        for text, warns in report_host.sentences(summary)
    ]
    if summary.rows:
        rows = [
            tuple(Cell(text, True) for text in report_host.table_cells(row)) for row in summary.rows
        ]
        where = f" on {summary.host}" if summary.host else ""
        section.tables.append(
            Table(f"Readings{where}, on the job's timeline", report_host.TABLE_HEAD, rows)
        )
    return section


def sweep_section(directory: Path) -> Section | None:
    """A sweep's levels and plots: DIR is the sweep's folder or one of its levels."""
    for where in (directory, directory.parent):
        path = where / SWEEP_JSON
        if path.is_file():
            return _sweep(where, json.loads(path.read_text(encoding="utf-8")))
    return None


def _sweep(where: Path, sweep: Any) -> Section:
    section = Section("sweep", "Concurrency sweep")
    levels = sweep.get("levels") if isinstance(sweep, dict) else None
    columns = (
        ("concurrency", "Concurrency", "{:,}"),
        ("records_per_min", "Records/min (steady)", "{:,.1f}"),
        ("hit_rate", "Hit rate", "{:.1%}"),
        ("kv_usage_max", "KV cache max", "{:.1%}"),
        ("preemptions", "Preemptions", "{:,.0f}"),
        ("bottleneck", "Bottleneck", "{}"),
    )
    rows = [
        tuple(Cell(_fmt(level.get(key), fmt), key != "bottleneck") for key, _, fmt in columns)
        for level in (levels if isinstance(levels, list) else [])
        if isinstance(level, dict)
    ]
    section.tables.append(Table("One row per level", tuple(title for _, title, _ in columns), rows))
    for name in SWEEP_PLOTS:
        if (where / name).is_file():
            png = base64.b64encode((where / name).read_bytes()).decode("ascii")
            section.images.append(Image(name.removesuffix(".png").replace("_", " "), png))
    return section


# ---- the figures' data ------------------------------------------------------------------------
def error_causes(folder: JobFolder) -> Counter[tuple[str, str]]:
    """Record errors by (kind, cause in the kit's words); an HTTP error by its status only."""
    causes: Counter[tuple[str, str]] = Counter()
    for obj, outcome in folder.results(lines.ResultsDamage()):
        if not outcome.ok and "status" in obj:
            causes[_cause(obj.get("failure"))] += 1
    for obj in _meta_failures(folder):
        causes[_cause(obj)] += 1
    return causes


def _meta_failures(folder: JobFolder) -> Iterator[Any]:
    """An OpenAI batch job's failures (its meta lines carry them)."""
    for obj in iter_json_lines(folder.files.meta):
        if obj.get("ok") is False:
            yield obj.get("failure")


def _cause(failure: Any) -> tuple[str, str]:
    if not isinstance(failure, dict):
        return "unknown", "(written before failures were typed)"
    kind = str(failure.get("kind") or "unknown")
    if kind == _SERVERS_WORDS:
        return kind, f"HTTP {failure.get('code')}"
    return kind, str(failure.get("cause") or "")


def _timings(folder: JobFolder) -> Iterator[lines.Timing]:
    for finished in folder.finished():
        if finished.timing is not None:
            yield finished.timing
    yield from folder.meta_timings()


def _identity_rows(ident: Any) -> list[tuple[Cell, ...]]:
    if not isinstance(ident, dict) or "unreachable" in ident:
        why = ident.get("unreachable") if isinstance(ident, dict) else "no answer"
        return [(Cell("unreachable"), Cell(str(why)))]
    shown = [k for k in report_serving.SHOWN if k in ident]
    rest = sorted(
        k for k in ident if k not in report_serving.SHOWN and str(ident[k]) not in ("", "None")
    )
    return [(Cell(k), Cell(str(ident[k]))) for k in [*shown, *rest]]


def _fmt(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)
