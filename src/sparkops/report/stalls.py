"""The report's stalls: per endpoint and run, when it stalled, how many calls were re-routed,
and whether it rejoined; read from the "stalled"/"rejoined" events of runs.jsonl, which the
client's stall watch (batch/stall.py) writes. Here, not in the client, because only the
readers need it: the report reads a job folder without loading the client.
"""

from __future__ import annotations

from sparkops.jobdir.job_report import StallRow
from sparkops.jobdir.lines import RunEvent

__all__ = ["StallRow", "sentence", "summarise"]


def summarise(events: list[RunEvent]) -> list[StallRow]:
    """Per endpoint and run, from runs.jsonl "stalled"/"rejoined" events: when it stalled,
    how many calls were re-routed, and whether (after how long) it rejoined. For the report."""
    out: list[StallRow] = []
    open_: dict[tuple[int, str | None], StallRow] = {}
    for e in events:
        key = (e.run, e.endpoint)
        if e.event == "stalled":
            row = StallRow(e.endpoint, e.run, e.quiet_s, e.in_flight)
            out.append(row)
            open_[key] = row
        elif e.event == "rejoined" and key in open_:
            open_.pop(key).rejoined_after_s = e.out_s
    return out


def sentence(row: StallRow) -> str:
    """One report line for a stall (endpoint URLs only: no record ever appears here)."""
    text = (
        f"Endpoint {row.endpoint} stalled in run {row.run}: nothing advanced for "
        f"{row.quiet_s:,.0f} s while calls were in flight; its {row.rerouted} in-flight "
        "call(s) were sent to other endpoints"
        if row.quiet_s is not None
        else f"Endpoint {row.endpoint} stalled in run {row.run}"
    )
    if row.rejoined_after_s is not None:
        return text + f"; it advanced again and rejoined after {row.rejoined_after_s:,.0f} s."
    return text + "; it did not rejoin before the run ended."
