"""Write report.json, report.md and throughput.png into the job directory (0600)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkops.files import write_atomic, write_figure
from sparkops.jobdir.status import OtherModelAnswers
from sparkops.metrics.timeline import completion_rate_series, hit_rate_series, short_window_note
from sparkops.report import serving as report_serving
from sparkops.report import stalls
from sparkops.report.compute import JobData, compute_report, load_dir

ROWS = [
    ("records", "Records in input", "{:,}"),
    ("schedule", "Schedule", "{}"),
    ("done", "Done", "{:,}"),
    ("errors", "Errors", "{:,}"),
    ("calls_per_record", "Calls per record", "{:.2f}"),
    ("records_per_min", "Records/min (whole run)", "{:,.1f}"),
    ("records_per_min_steady", "Records/min (steady, middle of run)", "{:,.1f}"),
    ("computed_tok_s", "Computed tok/s (steady: computed prompt + generated)", "{:,.0f}"),
    ("computed_prompt_tok_s", "Computed prompt tok/s (steady, not from the cache)", "{:,.0f}"),
    ("generation_tok_s", "Generation tok/s (steady)", "{:,.0f}"),
    ("effective_tok_s", "Effective tok/s (steady: all prompt + generated)", "{:,.0f}"),
    ("bottleneck", "Bottleneck", "{}"),
    ("prefix_cache_hit_rate", "Prefix cache hit rate", "{:.1%}"),
    ("prefix_cache_hit_rate_ceiling", "Hit-rate ceiling (whole shared blocks)", "{:.1%}"),
    ("record_latency_p50_s", "Record latency p50 (s)", "{:,.1f}"),
    ("record_latency_p95_s", "Record latency p95 (s)", "{:,.1f}"),
    ("kv_cache_usage_max", "KV cache usage, max", "{:.1%}"),
    ("preemptions", "Preemptions", "{:,}"),
]


def markdown(report: dict[str, Any], name: str) -> str:
    lines = [f"# Batch report: {name}", "", "| Figure | Value |", "|---|---|"]
    for key, label, fmt in ROWS:
        value = report.get(key)
        lines.append(f"| {label} | {'-' if value is None else fmt.format(value)} |")
    lines += _notes(report)
    lines += _decisions(report)
    if report.get("prefix_steps"):
        lines += [
            "",
            f"Shared prefix per step (block size {report.get('block_size')}):",
            "",
            "| Step | Shared tokens | Reusable (whole blocks) | Tail recomputed |",
            "|---|---|---|---|",
        ]
        for step, p in report["prefix_steps"].items():
            lines.append(
                f"| {step} | {p['shared_tokens']} | {p['reusable_tokens']} | {p['tail_tokens']} |"
            )
    if report.get("steps"):
        lines += _steps_table(report["steps"], report.get("hit_rate_verdict"))
    lines += report_serving.markdown_lines(report.get("serving"))
    return "\n".join(lines) + "\n"


def _decisions(report: dict[str, Any]) -> list[str]:
    """How many done records ended in each decision (the pipeline's final label), most first:
    the figure a researcher reads first, which only report.json's `finals` held."""
    finals = report.get("finals") or {}
    done = sum(finals.values())
    if not done:
        return []
    lines = ["", "Decisions (the final label of each done record):", ""]
    lines += ["| Decision | Records | Share |", "|---|---|---|"]
    for label, n in sorted(finals.items(), key=lambda item: (-item[1], str(item[0]))):
        lines.append(f"| {'-' if label is None else label} | {n:,} | {n / done:.1%} |")
    return lines


def _notes(report: dict[str, Any]) -> list[str]:
    """Sentences for figures the table leaves out or that could mislead on their own."""
    notes = []
    if not report.get("done") and report.get("finished"):
        notes.append(
            f"No record was done ({report.get('errors', 0):,} errors), so no records/min "
            "is reported."
        )
    elif reason := report.get("records_per_min_steady_reason"):
        notes.append(f"Steady records/min: not measured: {reason}.")
    if note := short_window_note(report.get("steady_samples"), "A steady window"):
        notes.append(note)
    if report.get("results_lines_note"):
        notes.append(report["results_lines_note"])
    if report.get("usage_impossible_note"):
        notes.append(report["usage_impossible_note"])
    notes += [
        f"**{OtherModelAnswers(**x).sentence()}**: their decisions are that model's, not the "
        "pipeline's."
        for x in report.get("other_model_answers") or []
    ]
    for step, n in (report.get("truncated_answers") or {}).items():
        notes.append(
            f"Step {step}: {n['cut']:,} of {n['answers']:,} answers were cut off at its "
            'max_tokens (finish_reason "length"): their decisions are partial answers or the '
            "step's default; raise the step's max_tokens and run the job again (--restart, or "
            "a new --out)."
        )
    if report.get("bottleneck_sentence"):
        notes.append(f"Bottleneck: {report['bottleneck_sentence']}.")
    if report.get("prefix_cache_hit_rate_note"):
        notes.append(report["prefix_cache_hit_rate_note"])
    notes += [
        stalls.sentence(stalls.StallRow(**row)) for row in report.get("stalled_endpoints") or []
    ]
    if changes := (report.get("serving") or {}).get("changes"):
        notes.append(
            f"The serving setup changed {len(changes)} time(s) during the job (see Serving "
            "record below): figures over the whole job mix the setups."
        )
    return ["", *notes] if notes else []


def _steps_table(steps: list[dict[str, Any]], summary: str | None) -> list[str]:
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
        hit = "-" if r["hit_rate"] is None else pct(r["hit_rate"])
        ceil = "-" if r["ceiling"] is None else pct(r["ceiling"])
        lines.append(f"| {r['step']} | {r['calls']:,} | {r['prompt_tokens']:,} | {hit} | {ceil} |")
    lines.append("")
    lines += [f"- {r['verdict']}" for r in steps]
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


def write_report(directory: Path) -> dict[str, Any]:
    data = load_dir(directory)
    report = compute_report(data)
    write_atomic(directory / "report.json", json.dumps(report, indent=2) + "\n")
    write_atomic(directory / "report.md", markdown(report, directory.name))
    plot(data, directory / "throughput.png")
    return report
