"""The host while the job ran, for the report: host.jsonl's readings (batch/host_watch.py)
summed up beside the job's timeline, and the servers' restarts its /metrics samples show.

What an operator reads on Monday after a weekend's job: how low free memory went, whether the
large free blocks ran out (fragmentation, the GB10 hang reports' cause), whether the GPU driver
logged `NV_ERR_NO_MEMORY` or an Xid, whether the serving container restarted, and how much disk
was left, each placed at its time and the records finished by then. A source the watch could
not read is said as unknown with its reason, never as zero.

A server restart shows in its /metrics counters too: a counter that goes down between two
samples of one endpoint started again from zero (Prometheus reads a counter reset the same
way), so a restart is seen even where Docker could not be asked, and on a remote server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.folder import JobDir
from sparkops.metrics.host import HIGH_ORDER_MIB, HostReading, HostRow, HostSummary
from sparkops.metrics.timeline import COUNTERS, TimelineSample
from sparkops.units import GIB

# At most this many readings in the report's table (every one where something happened first).
TABLE_ROWS = 12


def load_readings(directory: Path) -> list[HostReading]:
    """host.jsonl's readings in time order (a line that cannot be read is skipped)."""
    found = (HostReading.from_json(obj) for obj in iter_json_lines(JobDir(directory).host))
    return sorted((r for r in found if r is not None), key=lambda r: r.t)


def server_restarts(samples: Iterable[TimelineSample]) -> dict[str, int]:
    """Per endpoint, how often its /metrics counters went down between two of its samples
    (a restart of the server between them), runs included: a reboot between runs counts."""
    last: dict[str, dict[str, float]] = {}
    restarts: Counter[str] = Counter()
    for sample in sorted(samples, key=lambda s: s.t):
        counters = {k: v for k, v in sample.v.items() if k in COUNTERS}
        if not counters:
            continue  # a failed scrape says nothing
        before = last.get(sample.endpoint, {})
        if any(v < before[k] for k, v in counters.items() if k in before):
            restarts[sample.endpoint] += 1
        last[sample.endpoint] = counters
    return {name: restarts[name] for name in sorted(last)}


def summarise(
    readings: Sequence[HostReading], samples: Iterable[TimelineSample], origin: float | None
) -> HostSummary | None:
    """The report's host section; None for a job whose watch took no reading and whose
    servers never restarted (a job from before host.jsonl)."""
    restarted = server_restarts(samples)
    if not readings and not any(restarted.values()):
        return None
    high = [r.high_order_free for r in readings if r.high_order_free is not None]
    disk = [r.disk_free for r in readings if r.disk_free is not None]
    unknown: dict[str, str] = {}
    for r in readings:
        for source, why in r.unknown.items():
            unknown.setdefault(source, why)
    start = origin if origin is not None else (readings[0].t if readings else 0.0)
    return HostSummary(
        host=readings[-1].host if readings else None,
        readings=len(readings),
        mem_available_min=_lowest(r.mem_available for r in readings),
        mem_free_min=_lowest(r.mem_free for r in readings),
        high_order_free_first=high[0] if high else None,
        high_order_free_min=min(high) if high else None,
        high_order_free_last=high[-1] if high else None,
        disk_free_min=min(disk) if disk else None,
        disk_free_last=disk[-1] if disk else None,
        nvrm=_driver_errors(readings),
        container_restarts=_container_restarts(readings)[-1] if readings else None,
        server_restarts=restarted,
        unknown=unknown,
        rows=tuple(_rows(readings, start)),
    )


def _lowest(values: Iterable[int | None]) -> int | None:
    return min((v for v in values if v is not None), default=None)


def _driver_errors(readings: Sequence[HostReading]) -> dict[str, int] | None:
    """Every driver error the job's readings saw, by code; None when none could read them."""
    read = [r.nvrm for r in readings if r.nvrm is not None]
    if not read:
        return None
    total: Counter[str] = Counter()
    for counts in read:
        total.update(counts)
    return dict(total.most_common())


def _container_restarts(readings: Sequence[HostReading]) -> list[int | None]:
    """After each reading, the serving container's starts seen since the first reading (a new
    start time of a container the previous reading saw), None until Docker answered once."""
    seen: dict[str, str] = {}
    count: int | None = None
    out: list[int | None] = []
    for r in readings:
        if r.containers is not None:
            count = count or 0
            for name, state in r.containers.items():
                started = str(state.get("started") or "")
                if name in seen and started and started != seen[name]:
                    count += 1
                if started:
                    seen[name] = started
        out.append(count)
    return out


def _rows(readings: Sequence[HostReading], origin: float) -> list[HostRow]:
    """Up to TABLE_ROWS readings: each one where a driver error or a restart appeared, then
    evenly spread ones, first and last included, in time order."""
    restarts = _container_restarts(readings)
    errors: list[int | None] = []
    total: int | None = None
    for r in readings:
        if r.nvrm is not None:
            total = (total or 0) + sum(r.nvrm.values())
        errors.append(total)
    n = len(readings)
    if n <= TABLE_ROWS:
        chosen = set(range(n))
    else:
        events = [
            i for i in range(1, n) if (errors[i], restarts[i]) != (errors[i - 1], restarts[i - 1])
        ]
        chosen = {0, n - 1, *events[: TABLE_ROWS // 2]}
        spread = TABLE_ROWS - len(chosen)
        chosen.update(round(k * (n - 1) / (spread + 1)) for k in range(1, spread + 1))
    return [
        HostRow(
            round(readings[i].t - origin, 1),
            readings[i].run,
            readings[i].done,
            readings[i].mem_available,
            readings[i].mem_free,
            readings[i].high_order_free,
            readings[i].disk_free,
            errors[i],
            restarts[i],
        )
        for i in sorted(chosen)
    ]


# ---- words ----------------------------------------------------------------------------------
def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.1f}"


def sentences(summary: HostSummary) -> list[tuple[str, bool]]:
    """The host section's sentences, each with whether it warns."""
    s = summary
    out: list[tuple[str, bool]] = []
    if s.readings:
        out.append(
            (
                f"Lowest MemAvailable {gib(s.mem_available_min)} GiB, lowest MemFree "
                f"{gib(s.mem_free_min)} GiB.",
                False,
            )
        )
        if s.high_order_free_min is not None:
            out.append(
                (
                    f"Free memory in blocks of {HIGH_ORDER_MIB:g} MiB or more: "
                    f"{gib(s.high_order_free_first)} GiB at the first reading, "
                    f"{gib(s.high_order_free_min)} GiB at the lowest, "
                    f"{gib(s.high_order_free_last)} GiB at the last.",
                    False,
                )
            )
        if s.disk_free_min is not None:
            out.append(
                (
                    f"Disk free under the job folder: {gib(s.disk_free_min)} GiB at the lowest, "
                    f"{gib(s.disk_free_last)} GiB at the last.",
                    False,
                )
            )
    out.append(_errors_sentence(s))
    out.append(_container_sentence(s))
    for name, n in s.server_restarts.items():
        if n:
            out.append(
                (
                    f"{name}: its /metrics counters went back to zero {n} time(s): the server "
                    "restarted during the job.",
                    True,
                )
            )
    return [item for item in out if item[0]]


def _errors_sentence(s: HostSummary) -> tuple[str, bool]:
    if s.nvrm is None:
        if not s.readings:
            return "", False
        why = s.unknown.get("kernel log")
        where = f" ({why})" if why else " (read only where the job runs on the Spark serving it)"
        return f"GPU driver errors during the job: unknown{where}.", False
    if not s.nvrm:
        return "GPU driver errors during the job: none (kernel log).", False
    listed = ", ".join(f"{code} x{n}" for code, n in s.nvrm.items())
    return (
        f"GPU driver errors during the job: {listed} (kernel log): reboot the Spark before "
        "the next day-long job (docs/deploy.md, 'Before a day-long job').",
        True,
    )


def _container_sentence(s: HostSummary) -> tuple[str, bool]:
    if s.container_restarts is None:
        if not s.readings or "container restarts" not in s.unknown:
            return "", False
        return (
            f"Serving container restarts: unknown ({s.unknown['container restarts']}).",
            False,
        )
    if not s.container_restarts:
        return "Serving container restarts during the job (Docker): none.", False
    return (
        f"Serving container restarts during the job (Docker): {s.container_restarts}.",
        True,
    )


TABLE_HEAD = (
    "Time (s)",
    "Run",
    "Finished",
    "MemAvailable (GiB)",
    "MemFree (GiB)",
    f"Free in {HIGH_ORDER_MIB:g} MiB+ blocks (GiB)",
    "Disk free (GiB)",
    "Driver errors",
    "Container restarts",
)


def table_cells(row: HostRow) -> tuple[str, ...]:
    def count(n: int | None) -> str:
        return "-" if n is None else f"{n:,}"

    return (
        f"{row.at_s:,.0f}",
        str(row.run),
        count(row.done),
        gib(row.mem_available),
        gib(row.mem_free),
        gib(row.high_order_free),
        gib(row.disk_free),
        count(row.nvrm),
        count(row.restarts),
    )


def markdown_lines(summary: HostSummary | None) -> list[str]:
    """report.md's host section (nothing for a job from before host.jsonl)."""
    if summary is None:
        return []
    count = f"{summary.readings} reading{'' if summary.readings == 1 else 's'}"
    where = f" ({summary.host}, {count} in host.jsonl)" if summary.host else ""
    lines = ["", f"Host while the job ran{where}:", ""]
    lines += [f"- {'**' + text + '**' if warns else text}" for text, warns in sentences(summary)]
    if summary.rows:
        lines += ["", "| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD)]
        lines += ["| " + " | ".join(table_cells(row)) + " |" for row in summary.rows]
    return lines


def host_figure(readings: Sequence[HostReading], origin: float) -> Any:
    """Free memory (MemAvailable, MemFree, in large blocks) and disk free over the job, with
    a mark where a driver error or a container restart appeared."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    series = (
        ("MemAvailable", "mem_available", "-"),
        ("MemFree", "mem_free", "-"),
        (f"free in {HIGH_ORDER_MIB:g} MiB+ blocks", "high_order_free", "-"),
        ("disk free under the job folder", "disk_free", ":"),
    )
    for label, name, style in series:
        points = [(r.t - origin, getattr(r, name)) for r in readings]
        shown = [(t, v / GIB) for t, v in points if v is not None]
        if shown:
            ax.plot(*zip(*shown, strict=True), style, label=label)
    restarts = _container_restarts(readings)
    marks = [
        (r.t - origin, "driver error" if r.nvrm else "container restart")
        for i, r in enumerate(readings)
        if r.nvrm or (i and restarts[i] != restarts[i - 1])
    ]
    labelled: set[str] = set()
    for t, what in marks:
        label = "_nolegend_" if what in labelled else what
        labelled.add(what)
        ax.axvline(t, color="tab:red", linestyle="--", linewidth=1, label=label)
    ax.set_xlabel("seconds since the job started")
    ax.set_ylabel("GiB")
    ax.set_ylim(bottom=0)
    ax.set_title("The host while the job ran")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
