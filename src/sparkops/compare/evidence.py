"""What `compare` adds for a paper (issue 40 items 1-2): every figure's 95% interval, which
method gave it, and, with `--margin`, the equivalence verdict per paired figure; as data
(`Evidence`, its JSON) and as the tables and lines the terminal shows.

The statistics are compare/intervals.py's and compare/equivalence.py's; this module only
gathers them for one comparison and says them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from sparkops.compare.equivalence import Verdict, figure_name, points, verdicts
from sparkops.compare.intervals import (
    BOOTSTRAP,
    FIGURE_NAMES,
    WILSON,
    Bootstrap,
    Estimate,
    Intervals,
    PairedCells,
    intervals,
    methods_text,
)
from sparkops.compare.stats import Comparison
from sparkops.errors import UserError

SMALLEST_RESAMPLES = 1_000
LARGEST_RESAMPLES = 1_000_000


def checked_bootstrap(resamples: int, seed: int) -> Bootstrap:
    """--resamples and --seed, refused where the interval would mislead or cannot be made."""
    if not SMALLEST_RESAMPLES <= resamples <= LARGEST_RESAMPLES:
        raise UserError(
            f"--resamples {resamples} is outside {SMALLEST_RESAMPLES:,} to "
            f"{LARGEST_RESAMPLES:,}: with fewer, a 95% interval's ends move from seed to seed; "
            "pass --resamples 10000 (the default) or more"
        )
    if seed < 0:
        raise UserError(f"--seed {seed} is negative; pass a whole number 0 or above")
    return Bootstrap(resamples, seed)


@dataclass(frozen=True)
class Evidence:
    """A comparison's intervals and, with a margin, its verdicts."""

    intervals: Intervals
    verdicts: tuple[Verdict, ...] = ()
    margin: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "intervals": self.intervals.as_dict(),
            "equivalence": {
                "margin": self.margin,
                "verdicts": [v.as_dict() for v in self.verdicts],
            }
            if self.margin is not None
            else None,
        }


def gather(
    result: Comparison,
    run_a: Mapping[str, str],
    run_b: Mapping[str, str],
    gold: Mapping[str, str] | None,
    positive: Iterable[str],
    boot: Bootstrap,
    margin: float | None,
) -> Evidence:
    """The intervals (and verdicts) of the comparison `result` of these decisions."""
    cells = PairedCells.of(run_a, run_b, gold)
    conf = result.gold_a
    baseline = (conf.baseline_correct, conf.n) if conf is not None and conf.n else None
    positive = list(positive)
    found = intervals(cells, positive, boot, result.kappa, baseline)
    said = tuple(verdicts(cells, positive, margin)) if margin is not None else ()
    return Evidence(found, said, margin)


def print_run_rates(evidence: Evidence, console: Console) -> None:
    """The positive rate per run (the screening rate) and its difference."""
    runs = evidence.intervals.runs
    diff = evidence.intervals.differences["positive_rate"]
    console.print(
        f"Positive rate: A {runs['a']['positive_rate'].percent()}, B "
        f"{runs['b']['positive_rate'].percent()}; B - A {diff.points()}",
        soft_wrap=True,
    )


def gold_table(evidence: Evidence, result: Comparison) -> Table:
    """Accuracy, sensitivity, specificity, PPV and NPV per run with their intervals, and the
    difference B - A; a figure per row, so the table fits a terminal's 80 columns."""
    ivs = evidence.intervals
    table = Table(title=f"Against gold labels ({result.gold_paired} records; 95% intervals)")
    for column in ("figure", "A", "B", "B - A (points)"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for figure in ("accuracy", "sensitivity", "specificity", "ppv", "npv"):
        a, b = ivs.runs["a"][figure], ivs.runs["b"][figure]
        diff = ivs.differences[figure].points(unit="")
        table.add_row(FIGURE_NAMES[figure], a.percent(), b.percent(), diff)
        if figure == "accuracy" and ivs.baseline is not None and result.gold_a is not None:
            # beside the accuracy it has to beat: both runs share it (the same records)
            said = ivs.baseline.percent()
            table.add_row(f" baseline ('{result.gold_a.majority}')", said, said, "")
    counts = [f"{c.tp}/{c.fp}/{c.tn}/{c.fn}" for c in (result.gold_a, result.gold_b) if c]
    table.add_row("TP/FP/TN/FN", *counts, "")
    return table


def recall_table(evidence: Evidence) -> Table | None:
    """Per-class recall of a step with more than two labels (None otherwise)."""
    recall = evidence.intervals.recall
    if not recall:
        return None
    table = Table(title="Recall per gold label (95% Wilson intervals)")
    for column in ("gold label", "records", "A", "B"):
        table.add_column(column, justify="left" if column == "gold label" else "right")
    for label, runs in recall.items():
        table.add_row(label, str(runs["a"].n), runs["a"].percent(), runs["b"].percent())
    return table


def verdict_table(evidence: Evidence) -> Table | None:
    """The equivalence verdict per paired figure (None without --margin)."""
    if evidence.margin is None:
        return None
    margin = points(evidence.margin)
    table = Table(title=f"Equivalence of B and A within {margin} points (--margin)")
    for column in ("figure", "records", "B - A", "90% interval (TOST)", "TOST p", "verdict"):
        table.add_column(column, justify="left" if column in ("figure", "verdict") else "right")
    for v in evidence.verdicts:
        table.add_row(
            figure_name(v.figure),
            str(v.n),
            "n/a" if v.difference is None else f"{100 * v.difference:+.1f} pts",
            "n/a" if v.ci90 is None else f"{100 * v.ci90[0]:+.1f} to {100 * v.ci90[1]:+.1f}",
            "n/a" if v.p_tost is None else f"{v.p_tost:.3g}",
            v.text(),
        )
    return table


def methods_lines(evidence: Evidence) -> list[str]:
    """Which method gave which interval, and what was left out of the bootstrap."""
    said = methods_text(evidence.intervals.boot)
    lines = [f"95% intervals: {said[WILSON]}; {said[BOOTSTRAP]}."]
    if evidence.margin is not None:
        lines.append(
            "Equivalence: paired two one-sided tests, 5% each side (z on the per-record "
            "differences; an exact bound where no record differs); different: exact McNemar "
            "p < 0.05; records needed at 80% power."
        )
    lines += [f"{name}: {note}." for name, note in undefined_notes(evidence.intervals)]
    return lines


def undefined_notes(ivs: Intervals) -> list[tuple[str, str]]:
    """Bootstrap figures with resamples in which they were undefined (left out)."""
    found: list[tuple[str, Estimate]] = [("Cohen's kappa", ivs.kappa)]
    found += [(f"{FIGURE_NAMES[k]} B - A", e) for k, e in ivs.differences.items()]
    return [
        (
            name,
            f"undefined in {e.undefined:,} of {ivs.boot.resamples:,} resamples (left out of "
            "its interval)",
        )
        for name, e in found
        if e.value is not None and e.undefined
    ]


def print_evidence(evidence: Evidence, result: Comparison, console: Console) -> None:
    """The gold table with intervals (the baseline beside accuracy), per-class recall and
    the verdicts."""
    if result.gold_a is not None and result.gold_b is not None:
        console.print(gold_table(evidence, result))
    for table in (recall_table(evidence), verdict_table(evidence)):
        if table is not None:
            console.print(table)


def print_methods(evidence: Evidence, console: Console) -> None:
    """Which method gave which interval (after every figure it applies to)."""
    for line in methods_lines(evidence):
        console.print(line, soft_wrap=True)
