"""Write report.json, report.md and throughput.png into the job directory (0600)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparkops.files import write_atomic, write_figure
from sparkops.jobdir.job_report import JobReport, StepRow
from sparkops.jobdir.reader import JobFolder
from sparkops.metrics.timeline import completion_rate_series, hit_rate_series, short_window_note
from sparkops.report import host as report_host
from sparkops.report import serving as report_serving
from sparkops.report import stalls
from sparkops.report.compute import JobData, compute_report, load_dir

# report.md's table: each row's label, its format, and the figure it shows.
ROWS: list[tuple[str, str, Callable[[JobReport], Any]]] = [
    ("Records in input", "{:,}", lambda r: r.records),
    ("Schedule", "{}", lambda r: r.schedule),
    ("Done", "{:,}", lambda r: r.done),
    ("Errors", "{:,}", lambda r: r.errors),
    ("Calls per record", "{:.2f}", lambda r: r.calls_per_record),
    ("Records/min (whole run)", "{:,.1f}", lambda r: r.records_per_min),
    ("Records/min (steady, middle of run)", "{:,.1f}", lambda r: r.records_per_min_steady),
    (
        "Computed tok/s (steady: computed prompt + generated)",
        "{:,.0f}",
        lambda r: r.computed_tok_s,
    ),
    (
        "Computed prompt tok/s (steady, not from the cache)",
        "{:,.0f}",
        lambda r: r.computed_prompt_tok_s,
    ),
    ("Generation tok/s (steady)", "{:,.0f}", lambda r: r.generation_tok_s),
    ("Effective tok/s (steady: all prompt + generated)", "{:,.0f}", lambda r: r.effective_tok_s),
    ("Bottleneck", "{}", lambda r: r.bottleneck),
    ("Prefix cache hit rate", "{:.1%}", lambda r: r.prefix_cache_hit_rate),
    (
        "Hit-rate ceiling (whole shared blocks)",
        "{:.1%}",
        lambda r: r.prefix_cache_hit_rate_ceiling,
    ),
    ("Record latency p50 (s)", "{:,.1f}", lambda r: r.record_latency_p50_s),
    ("Record latency p95 (s)", "{:,.1f}", lambda r: r.record_latency_p95_s),
    ("KV cache usage, max", "{:.1%}", lambda r: r.kv_cache_usage_max),
    ("Preemptions", "{:,}", lambda r: r.preemptions),
]


def markdown(report: JobReport, name: str) -> str:
    lines = [f"# Batch report: {name}", "", "| Figure | Value |", "|---|---|"]
    for label, fmt, figure_of in ROWS:
        value = figure_of(report)
        lines.append(f"| {label} | {'-' if value is None else fmt.format(value)} |")
    lines += _notes(report)
    lines += _decisions(report)
    if report.prefix_steps:
        lines += [
            "",
            f"Shared prefix per step (block size {report.block_size}):",
            "",
            "| Step | Shared tokens | Reusable (whole blocks) | Tail recomputed |",
            "|---|---|---|---|",
        ]
        for step, p in report.prefix_steps.items():
            lines.append(f"| {step} | {p.shared_tokens} | {p.reusable_tokens} | {p.tail_tokens} |")
    if report.steps:
        lines += _steps_table(report.steps, report.hit_rate_verdict)
    lines += report_serving.markdown_lines(report.serving)
    lines += report_host.markdown_lines(report.host)
    return "\n".join(lines) + "\n"


def _decisions(report: JobReport) -> list[str]:
    """How many done records ended in each decision (the pipeline's final label), most first:
    the figure a researcher reads first, which only report.json's `finals` held."""
    finals = report.finals
    done = sum(finals.values())
    if not done:
        return []
    lines = ["", "Decisions (the final label of each done record):", ""]
    lines += ["| Decision | Records | Share |", "|---|---|---|"]
    for label, n in sorted(finals.items(), key=lambda item: (-item[1], str(item[0]))):
        lines.append(f"| {'-' if label is None else label} | {n:,} | {n / done:.1%} |")
    return lines


def _notes(report: JobReport) -> list[str]:
    """Sentences for figures the table leaves out or that could mislead on their own."""
    notes = []
    if not report.done and report.finished:
        notes.append(
            f"No record was done ({report.errors:,} errors), so no records/min is reported."
        )
    elif reason := report.records_per_min_steady_reason:
        notes.append(f"Steady records/min: not measured: {reason}.")
    if note := short_window_note(report.steady_samples, "A steady window"):
        notes.append(note)
    if report.results_lines_note:
        notes.append(report.results_lines_note)
    if report.usage_impossible_note:
        notes.append(report.usage_impossible_note)
    notes += [
        f"**{x.sentence()}**: their decisions are that model's, not the pipeline's."
        for x in report.other_model_answers
    ]
    for step, n in report.truncated_answers.items():
        notes.append(
            f"Step {step}: {n.cut:,} of {n.answers:,} answers were cut off at its "
            'max_tokens (finish_reason "length"): their decisions are partial answers or the '
            "step's default; raise the step's max_tokens and run the job again (--restart, or "
            "a new --out)."
        )
    if report.bottleneck_sentence:
        notes.append(f"Bottleneck: {report.bottleneck_sentence}.")
    if report.prefix_cache_hit_rate_note:
        notes.append(report.prefix_cache_hit_rate_note)
    notes += [stalls.sentence(row) for row in report.stalled_endpoints]
    if report.serving is not None and (changes := report.serving.changes):
        notes.append(
            f"The serving setup changed {len(changes)} time(s) during the job (see Serving "
            "record below): figures over the whole job mix the setups."
        )
    return ["", *notes] if notes else []


def _steps_table(steps: Sequence[StepRow], summary: str | None) -> list[str]:
    """Per-step hit rate against its ceiling, and what the gap means."""
    pct = "{:.1%}".format
    lines = [
        "",
        "Prefix cache per step (hit rate from the server's cached tokens; ceiling from the "
        "prompts):",
        "",
        "| Step | Calls | Prompt tokens | Hit rate | Ceiling |",
        "|---|---|---|---|---|",
    ]
    for r in steps:
        hit = "-" if r.hit_rate is None else pct(r.hit_rate)
        ceil = "-" if r.ceiling is None else pct(r.ceiling)
        lines.append(f"| {r.step} | {r.calls:,} | {r.prompt_tokens:,} | {hit} | {ceil} |")
    lines.append("")
    lines += [f"- {r.verdict}" for r in steps]
    if summary:
        lines += ["", summary]
    return lines


def figure(data: JobData) -> Any:
    """The throughput plot as a matplotlib figure: records/min (per time bucket) and the
    prefix cache hit rate (per sampling interval), each at its own times, with a legend and
    a dashed line where a resumed run started (runs.jsonl start events)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finish = [t for ts in data.totals.finish.values() for t in ts]
    starts = sorted(r["start"] for r in data.runs.values() if "start" in r)
    sampled = [s.t for s in data.samples if s.v]
    origin = min([*finish, *starts, *sampled], default=0.0)
    end = max([*finish, *sampled], default=origin)
    bucket = max(1.0, (end - origin) / 40)
    rate_t, rate = completion_rate_series(finish, origin, bucket)
    hit_t, hit = hit_rate_series(data.samples, origin)
    fig, ax = plt.subplots(figsize=(8, 4))
    handles = ax.plot(
        rate_t,
        rate,
        color="tab:blue",
        marker="." if len(rate_t) < 30 else None,
        label=f"records/min (per {bucket:,.0f} s)",
    )
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("records/min", color="tab:blue")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    handles += ax2.plot(
        hit_t,
        [h * 100 for h in hit],
        color="tab:orange",
        marker="o",
        markersize=3,
        label="prefix cache hit rate" if hit_t else "prefix cache hit rate (no samples)",
    )
    ax2.set_ylabel("prefix cache hit rate (%)", color="tab:orange")
    ax2.set_ylim(0, 100)
    for i, t in enumerate(starts[1:]):
        line = ax.axvline(
            t - origin,
            color="tab:gray",
            linestyle="--",
            linewidth=1,
            label="resumed run starts" if i == 0 else "_nolegend_",
        )
        if i == 0:
            handles.append(line)
    ax.legend(handles=handles, loc="lower right", fontsize="small")
    ax.set_title("Throughput and prefix cache hit rate")
    fig.tight_layout()
    return fig


def plot(data: JobData, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(data)
    try:
        write_figure(path, fig, dpi=100)
    finally:
        plt.close(fig)


def write_report(directory: Path) -> JobReport:
    """Compute the report and write report.json (from the typed report), report.md and
    throughput.png into the job folder."""
    data = load_dir(directory)
    report = compute_report(data)
    files = JobFolder(directory).files
    write_atomic(files.report_json, report_json(report))
    write_atomic(files.report_md, markdown(report, directory.name))
    plot(data, files.plot)
    return report


def report_json(report: JobReport) -> str:
    """report.json's text (also what `sparkops report --json` prints)."""
    return json.dumps(report.to_json(), indent=2) + "\n"
