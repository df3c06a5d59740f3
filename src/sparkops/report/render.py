"""Write report.json, report.md and throughput.png into the job directory (0600)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sparkops.batch.journal import open_private
from sparkops.metrics.timeline import series_for_plot
from sparkops.report.compute import compute_report, load_dir

ROWS = [
    ("records", "Records in input", "{:,}"),
    ("schedule", "Schedule", "{}"),
    ("done", "Done", "{:,}"),
    ("errors", "Errors", "{:,}"),
    ("calls_per_record", "Calls per record", "{:.2f}"),
    ("records_per_min", "Records/min (whole run)", "{:,.1f}"),
    ("records_per_min_steady", "Records/min (steady, middle of run)", "{:,.1f}"),
    ("prompt_tokens_per_s", "Prompt tokens/s (steady)", "{:,.0f}"),
    ("generation_tokens_per_s", "Generation tokens/s (steady)", "{:,.0f}"),
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
    return "\n".join(lines) + "\n"


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


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [t for ts in data["finish"].values() for t in ts]
    span = (max(times) - min(times)) if times else 0
    bucket = max(1.0, span / 40)
    s = series_for_plot(data["samples"], times, bucket)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(s["t"], s["records_per_min"], color="tab:blue", label="records/min")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("records/min", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(s["t"], [h * 100 for h in s["hit_rate"]], color="tab:orange", label="hit rate")
    ax2.set_ylabel("prefix cache hit rate (%)", color="tab:orange")
    ax2.set_ylim(0, 100)
    ax.set_title("Throughput and prefix cache hit rate")
    fig.tight_layout()
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "wb") as fh:
        fig.savefig(fh, format="png", dpi=100)
    plt.close(fig)


def write_report(directory: Path) -> dict[str, Any]:
    data = load_dir(directory)
    report = compute_report(data)
    _write(directory / "report.json", json.dumps(report, indent=2) + "\n")
    _write(directory / "report.md", markdown(report, directory.name))
    plot(data, directory / "throughput.png")
    return report


def _write(path: Path, text: str) -> None:
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
