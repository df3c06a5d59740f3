"""The report's serving section: what served the job and where it changed (pure).

Reads the lines of DIR/serving.jsonl (batch/serving.py) and the count of finished records
per serving epoch (the `serving` field of results / OpenAI meta lines), and says which
records each setup served. Server facts only; nothing here reads a record's text.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from sparkops.jobdir.fields import text_or_none
from sparkops.jobdir.identity import IdentityChange, describe
from sparkops.jobdir.job_report import Capacity, ServingSummary, SetupChange
from sparkops.jobdir.serving_lines import (
    ServingChange,
    ServingLine,
    ServingRecord,
    ServingStart,
)
from sparkops.metrics.timeline import TimelineSample

# Identity fields shown in the report's table, in this order (the rest follow).
SHOWN = (
    "model",
    "max_model_len",
    "version",
    "root",
    "cache.block_size",
    "cache.cache_dtype",
    "cache.num_gpu_blocks",
    "cache.enable_prefix_caching",
    "cache.prefix_caching_hash_algo",
)


def summarise(
    lines: Sequence[ServingRecord],
    epochs: Mapping[Any, int],
    samples: Sequence[TimelineSample] = (),
) -> ServingSummary | None:
    """report.json's `serving`: the first start line's setup, every change, records per epoch,
    and the last run's capacity (concurrency against --max-num-seqs) with the waiting requests
    the timeline `samples` saw.

    None for a job without serving.jsonl (a job directory from before the record existed).
    """
    starts = [x for x in lines if isinstance(x, ServingStart)]
    if not starts:
        return None
    first = starts[0]
    changes: list[SetupChange] = []
    for x in lines:
        if x is first:
            continue
        if isinstance(x, ServingChange) and x.changes:
            changes.append(_change(x, x.endpoint, x.changes, epochs))
        elif isinstance(x, ServingStart):
            for base, items in x.changes.items():
                changes.append(_change(x, base, items, epochs, between_runs=True))
    kits = list(dict.fromkeys(str(x.kit_version) for x in starts))
    return ServingSummary(
        kit_version=text_or_none(first.kit_version),
        kit_versions=tuple(kits) if len(kits) > 1 else None,
        pipeline_fingerprint=text_or_none(first.context.get("pipeline_fingerprint")),
        input_fingerprint=text_or_none(first.context.get("input_fingerprint")),
        gpu=first.gpu if isinstance(first.gpu, dict) else None,
        stack=first.stack if isinstance(first.stack, dict) else None,
        endpoints=first.endpoints,
        changes=tuple(changes),
        records_by_serving={str(k): v for k, v in sorted(epochs.items(), key=_key)},
        capacity=_capacity(starts, samples),
    )


def _capacity(starts: list[ServingStart], samples: Sequence[TimelineSample]) -> Capacity | None:
    """The last run's capacity record (jobdir/identity.capacity) and the waiting
    requests (vllm:num_requests_waiting) per timeline sample: peak and median."""
    caps = [x.capacity for x in starts if x.capacity is not None]
    if not caps:
        return None
    waits = [float(s.v["waiting"]) for s in samples if "waiting" in s.v]
    return dataclasses.replace(
        Capacity.from_json(caps[-1]),
        waiting_peak=max(waits) if waits else None,
        waiting_median=statistics.median(waits) if waits else None,
    )


def capacity_text(cap: Capacity | None) -> str | None:
    """The report's sentence on concurrency against the server's --max-num-seqs."""
    if cap is None:
        return None
    peak, median = cap.waiting_peak, cap.waiting_median
    waiting = (
        f"waiting requests per sample: peak {peak:,.0f}, median {median:,.0f}"
        if peak is not None and median is not None
        else "no waiting figures sampled"
    )
    per, seqs = cap.per_endpoint, cap.max_num_seqs
    spread = "" if per == cap.concurrency else f" ({per} per endpoint)"
    if cap.over:
        return (
            f"**--concurrency {cap.concurrency}{spread} was above the server's "
            f"--max-num-seqs {seqs}**: requests beyond it waited in the server's queue "
            f"({waiting}); their latency includes that wait. Lower --concurrency to {seqs} "
            "or raise --max-num-seqs."
        )
    return (
        f"- Capacity: --concurrency {cap.concurrency}{spread} within the server's "
        f"--max-num-seqs {seqs} ({waiting})"
    )


def _change(
    line: ServingLine,
    base: str,
    items: list[IdentityChange],
    epochs: Mapping[Any, int],
    between_runs: bool = False,
) -> SetupChange:
    epoch = line.serving
    after = 0
    if epoch is not None:
        after = sum(n for k, n in epochs.items() if isinstance(k, int) and k >= epoch)
    return SetupChange(
        t=line.t,
        run=line.run,
        endpoint=base,
        serving=epoch,
        between_runs=between_runs,
        results_from=line.results_from,
        records_after=after,
        changes=tuple(items),
    )


def change_text(change: SetupChange) -> str:
    """One sentence for a change (report.md, `sparkops compare`)."""
    when = (
        f"between runs (run {change.run} found it changed)"
        if change.between_runs
        else f"during run {change.run}"
    )
    return (
        f"Endpoint {change.endpoint} changed {when}: {describe(change.changes, limit=8)}; "
        f"{change.records_after:,} record(s) finished after it (the results lines "
        f"after the first {change.results_from}, marked serving={change.serving})."
    )


def markdown_lines(summary: ServingSummary | None) -> list[str]:
    """The report.md section (empty without a serving record)."""
    if summary is None:
        return []
    lines = ["", "## Serving record", ""]
    if summary.changes:
        lines.append(
            f"**The serving setup changed {len(summary.changes)} time(s) during the job**: "
            "figures that mix the setups mix two experiments."
        )
        lines += [f"- {change_text(c)}" for c in summary.changes]
        lines.append("")
    else:
        lines += ["The serving setup did not change during the job.", ""]
    for base, ident in summary.endpoints.items():
        lines += [f"Endpoint {base} at the start:", "", "| Field | Value |", "|---|---|"]
        if not isinstance(ident, dict) or "unreachable" in ident:
            why = ident.get("unreachable") if isinstance(ident, dict) else "no answer"
            lines += [f"| unreachable | {why} |", ""]
            continue
        rest = sorted(k for k in ident if k not in SHOWN)
        unset = [k for k in rest if str(ident[k]) in ("", "None")]
        fields = [k for k in SHOWN if k in ident] + [k for k in rest if k not in unset]
        lines += [f"| {k} | {_cell(ident[k])} |" for k in fields]
        if unset:
            lines.append(f"| ({len(unset)} more without a value) | see serving.jsonl |")
        lines.append("")
    lines.append(f"- Kit version: {summary.kit_version}")
    if summary.kit_versions:
        lines.append(f"- Kit versions over the runs: {', '.join(summary.kit_versions)}")
    lines.append(
        f"- Pipeline fingerprint {summary.pipeline_fingerprint}, input fingerprint "
        f"{summary.input_fingerprint}"
    )
    lines.append(f"- GPU: {gpu_text(summary.gpu)}")
    lines.append(f"- Stack: {stack_text(summary.stack)}")
    if text := capacity_text(summary.capacity):
        lines.append(text if text.startswith("- ") else f"\n{text}")
    return lines


def gpu_text(gpu: Any) -> str:
    """The GPU state in a phrase (sparkops-gpu-check --json's object, or why it is absent)."""
    if not isinstance(gpu, dict):
        return "unavailable"
    if "unavailable" in gpu:
        return f"unavailable ({gpu['unavailable']})"
    ident = gpu.get("gpu")
    if not isinstance(ident, dict):
        ident = {}
    parts = [f"{k} {v}" for k, v in ident.items() if v not in (None, "")]
    parts += [f"{k} {gpu[k]}" for k in ("clock_mhz", "power_w") if gpu.get(k) is not None]
    parts.append(f"check: {gpu.get('state')}")
    return ", ".join(parts)


def stack_text(stack: Any) -> str:
    """The deployed stack in a phrase (profile, image), or how to record it."""
    if not isinstance(stack, dict):
        return "not recorded (pass --stack-record DIR/stack-record.json from the deploy)"
    if stack.get("local"):
        command = " ".join(map(str, stack.get("command") or []))
        return f"`sparkops local up` server, model {stack.get('model')}: `{command}`"
    keys = ("profile", "image", "base_image", "base_digest", "host", "role")
    parts = [f"{k} {stack[k]}" for k in keys if stack.get(k)]
    return ", ".join(parts) or "recorded (see serving.jsonl)"


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return (text or "(none)").replace("|", "\\|")


def _key(item: tuple[Any, int]) -> tuple[int, str]:
    k = item[0]
    return (k, "") if isinstance(k, int) else (1 << 30, str(k))
