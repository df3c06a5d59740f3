"""95% intervals for every figure `sparkops compare` prints (issue 40 item 1).

A figure a paper reports needs its uncertainty: 300 notes cannot tell 72% from 78%. Two
methods, each named beside the interval it gave:

- **Wilson score** for a proportion (agreement, a run's positive rate, accuracy, sensitivity,
  specificity, PPV, NPV, per-class recall, the majority-class baseline): closed form, good
  coverage at small n and near 0% or 100%, where the textbook Wald interval fails. The same
  formula as statsmodels' `proportion_confint(method="wilson")` (the tests check it).
- **Paired bootstrap** (percentile, 10,000 resamples, seeded) for Cohen's kappa and for every
  difference between the two runs: the records are resampled, each with both its decisions and
  its gold label, so the pairing holds (the runs saw the same notes; treating them as two
  samples would overstate the uncertainty of a difference). Resampling n records with
  replacement is drawing the counts of each distinct (decision A, decision B, gold) cell from a
  multinomial over those cells, which is what `PairedCells.resample` does: the same
  distribution as resampling records one by one (the tests check it against
  scipy.stats.bootstrap), at a cost that does not grow with n.

A resample in which a figure is undefined (no gold positive drawn, for a sensitivity; one
class in both runs, for kappa) is left out and counted (`Estimate.undefined`). The bootstrap
cannot widen what it never saw: with no record whose decision differs, a difference's
interval is 0 to 0 (the equivalence verdict, compare/equivalence.py, has an exact bound for
that case).

Why numpy and not scipy.stats.bootstrap at run time: scipy is not a dependency of the kit
(compare/stats.py says why); numpy already is (matplotlib needs it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from sparkops.compare.stats import normalise

LEVEL = 0.95
Z95 = NormalDist().inv_cdf(0.5 + LEVEL / 2)
DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0
WILSON = "wilson"
BOOTSTRAP = "bootstrap"

# One paired record as the statistics see it: (A's decision, B's decision, gold label or
# None), each normalised.
Cell = tuple[str, str, str | None]
CellTest = Callable[[Cell], bool]


@dataclass(frozen=True)
class Bootstrap:
    """How the paired bootstrap resamples: how many times, from which seed."""

    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED

    def describe(self) -> str:
        return (
            f"paired bootstrap (percentile, {self.resamples:,} resamples of the paired "
            f"records, seed {self.seed})"
        )


def methods_text(boot: Bootstrap) -> dict[str, str]:
    """Which method gave which interval, in words (printed under the tables, and in JSON)."""
    return {
        WILSON: "Wilson score interval, for every proportion (agreement, positive rate, "
        "accuracy, sensitivity, specificity, PPV, NPV, per-class recall, the baseline)",
        BOOTSTRAP: f"{boot.describe()}, for Cohen's kappa and every difference B - A",
    }


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95% interval, and the method that gave the interval. `count` and
    `n` are a proportion's numerator and denominator (None for kappa and differences)."""

    value: float | None
    low: float | None
    high: float | None
    method: str
    count: int | None = None
    n: int | None = None
    undefined: int = 0  # bootstrap resamples where the figure was undefined, left out

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "level": LEVEL,
            "method": self.method,
            "count": self.count,
            "n": self.n,
            "undefined_resamples": self.undefined,
        }

    def percent(self) -> str:
        """`72.3% (67.0-77.1)`; `n/a` when the figure is undefined."""
        if self.value is None:
            return "n/a"
        if self.low is None or self.high is None:
            return f"{self.value:.1%}"
        return f"{self.value:.1%} ({100 * self.low:.1f}-{100 * self.high:.1f})"

    def points(self, unit: str = " pts") -> str:
        """A difference in percentage points: `-1.7 pts (-4.0 to +0.3)`."""
        if self.value is None:
            return "n/a"
        head = f"{100 * self.value:+.1f}{unit}"
        if self.low is None or self.high is None:
            return head
        return f"{head} ({100 * self.low:+.1f} to {100 * self.high:+.1f})"

    def plain(self, digits: int = 3) -> str:
        """Kappa: `0.412 (0.310 to 0.507)`."""
        if self.value is None:
            return "undefined"
        if self.low is None or self.high is None:
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} ({self.low:.{digits}f} to {self.high:.{digits}f})"


def wilson(count: int, n: int) -> Estimate:
    """The Wilson score interval for `count` of `n` (value None when n is 0)."""
    if n <= 0:
        return Estimate(None, None, None, WILSON, count, n)
    p = count / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), WILSON, count, n)


@dataclass(frozen=True)
class PairedCells:
    """The paired records reduced to their distinct cells and how many records each holds:
    everything kappa and the gold figures depend on, so resampling cells is resampling
    records (the module docstring says why)."""

    keys: tuple[Cell, ...]
    counts: tuple[int, ...]

    @classmethod
    def of(
        cls,
        run_a: Mapping[str, str],
        run_b: Mapping[str, str],
        gold: Mapping[str, str] | None = None,
    ) -> PairedCells:
        """The records decided in both runs, each with its gold label when it has one."""
        golds = {k: normalise(v) for k, v in (gold or {}).items()}
        tally: dict[Cell, int] = {}
        for key in sorted(run_a.keys() & run_b.keys()):
            cell = (normalise(run_a[key]), normalise(run_b[key]), golds.get(key))
            tally[cell] = tally.get(cell, 0) + 1
        ordered = sorted(tally.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or ""))
        return cls(tuple(k for k, _ in ordered), tuple(n for _, n in ordered))

    @property
    def n(self) -> int:
        return sum(self.counts)

    def observed(self) -> np.ndarray:
        """The observed counts as one row (the point estimates use the same formulas)."""
        return np.array([self.counts], dtype=np.int64)

    def resample(self, boot: Bootstrap) -> np.ndarray:
        """`boot.resamples` rows of cell counts, each a resample of the n records."""
        rng = np.random.default_rng(boot.seed)
        n = self.n
        if n == 0 or not self.keys:
            return np.zeros((boot.resamples, len(self.keys)), dtype=np.int64)
        p = np.array(self.counts, dtype=float) / n
        return rng.multinomial(n, p, size=boot.resamples)

    def mask(self, test: CellTest) -> np.ndarray:
        return np.array([test(cell) for cell in self.keys], dtype=np.int64)

    def total(self, counts: np.ndarray, test: CellTest) -> np.ndarray:
        """Records passing `test` in each row of `counts`."""
        return np.asarray(counts @ self.mask(test), dtype=np.int64)


def proportion(
    cells: PairedCells, counts: np.ndarray, numerator: CellTest, denominator: CellTest
) -> np.ndarray:
    """numerator / denominator per row of `counts` (NaN where the denominator is 0);
    `numerator` is only asked of cells `denominator` accepts."""
    den = cells.total(counts, denominator)
    num = cells.total(counts, lambda c: denominator(c) and numerator(c))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def kappa_rows(cells: PairedCells, counts: np.ndarray) -> np.ndarray:
    """Cohen's kappa per row of `counts` (NaN where both runs used one and the same class:
    undefined, as compare/stats.cohen_kappa says)."""
    labels = sorted({c[0] for c in cells.keys} | {c[1] for c in cells.keys})
    in_a = np.array([[c[0] == x for x in labels] for c in cells.keys], dtype=np.int64)
    in_b = np.array([[c[1] == x for x in labels] for c in cells.keys], dtype=np.int64)
    n = counts.sum(axis=1)
    agree = cells.total(counts, lambda c: c[0] == c[1])
    by_a, by_b = counts @ in_a, counts @ in_b
    chance = (by_a * by_b).sum(axis=1)  # integer: n * n exactly when chance agreement is 1
    squared = n * n
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = (agree * n - chance) / (squared - chance)
    return np.where((n > 0) & (chance != squared), kappa, np.nan)


def percentile_interval(values: np.ndarray) -> tuple[float | None, float | None, int]:
    """The 2.5th and 97.5th percentiles of the defined values, and how many were not."""
    defined = values[~np.isnan(values)]
    undefined = int(values.size - defined.size)
    if defined.size == 0:
        return None, None, undefined
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(defined, [tail, 100 - tail])
    return float(low), float(high), undefined


def bootstrapped(point: float | None, values: np.ndarray) -> Estimate:
    """A figure's point value with the percentile interval of its resampled values."""
    if point is None:
        return Estimate(None, None, None, BOOTSTRAP, undefined=int(values.size))
    low, high, undefined = percentile_interval(values)
    return Estimate(point, low, high, BOOTSTRAP, undefined=undefined)


# ---- the figures -------------------------------------------------------------------------------
RUNS = ("a", "b")
GOLD_FIGURES = ("accuracy", "sensitivity", "specificity", "ppv", "npv")
FIGURE_NAMES = {
    "positive_rate": "positive rate",
    "accuracy": "accuracy",
    "sensitivity": "sensitivity",
    "specificity": "specificity",
    "ppv": "PPV",
    "npv": "NPV",
}


def figure_tests(figure: str, run: int, positive: frozenset[str]) -> tuple[CellTest, CellTest]:
    """(numerator, denominator) of one run's figure over cells: run 0 is A, 1 is B. Every
    label counts as positive or not, as compare/stats.confusion counts it."""

    def says(c: Cell) -> bool:
        return c[run] in positive

    def graded(c: Cell) -> bool:
        return c[2] is not None

    def truly(c: Cell) -> bool:
        return c[2] is not None and c[2] in positive

    tests: dict[str, tuple[CellTest, CellTest]] = {
        "positive_rate": (says, lambda c: True),
        "accuracy": (lambda c: says(c) == truly(c), graded),
        "sensitivity": (says, truly),
        "specificity": (lambda c: not says(c), lambda c: graded(c) and not truly(c)),
        "ppv": (truly, lambda c: graded(c) and says(c)),
        "npv": (lambda c: not truly(c), lambda c: graded(c) and not says(c)),
    }
    return tests[figure]


def figures_for(gold: bool) -> tuple[str, ...]:
    return ("positive_rate", *GOLD_FIGURES) if gold else ("positive_rate",)


def counted(cells: PairedCells, numerator: CellTest, denominator: CellTest) -> Estimate:
    """The observed proportion numerator / denominator with its Wilson interval."""
    observed = cells.observed()
    den = int(cells.total(observed, denominator)[0])
    num = int(cells.total(observed, lambda c: denominator(c) and numerator(c))[0])
    return wilson(num, den)


def run_figure(cells: PairedCells, figure: str, run: int, positive: frozenset[str]) -> Estimate:
    """One run's proportion with its Wilson interval."""
    return counted(cells, *figure_tests(figure, run, positive))


def difference(
    cells: PairedCells, resampled: np.ndarray, figure: str, positive: frozenset[str]
) -> Estimate:
    """B - A for one figure, with its paired bootstrap interval."""
    a_num, a_den = figure_tests(figure, 0, positive)
    b_num, b_den = figure_tests(figure, 1, positive)

    def rows(counts: np.ndarray) -> np.ndarray:
        return proportion(cells, counts, b_num, b_den) - proportion(cells, counts, a_num, a_den)

    point = float(rows(cells.observed())[0])
    return bootstrapped(None if math.isnan(point) else point, rows(resampled))


def class_recall(cells: PairedCells, run: int, label: str) -> Estimate:
    """Of the records whose gold label is `label`, the share the run gave that very label
    (Wilson): recall per class, for a step with more than two labels."""

    def said(c: Cell) -> bool:
        return c[run] == label

    def labelled(c: Cell) -> bool:
        return c[2] == label

    return counted(cells, said, labelled)


@dataclass(frozen=True)
class Intervals:
    """Every interval `compare` prints: per run (`runs["a"]["accuracy"]`), the differences
    B - A, agreement, kappa and per-class recall (multi-label steps), with the methods."""

    boot: Bootstrap
    agreement: Estimate
    kappa: Estimate
    runs: dict[str, dict[str, Estimate]]
    differences: dict[str, Estimate]
    baseline: Estimate | None = None
    recall: dict[str, dict[str, Estimate]] | None = None  # gold label -> {"a", "b"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": LEVEL,
            "methods": methods_text(self.boot),
            "resamples": self.boot.resamples,
            "seed": self.boot.seed,
            "agreement": self.agreement.as_dict(),
            "kappa": self.kappa.as_dict(),
            "runs": {r: {k: e.as_dict() for k, e in figs.items()} for r, figs in self.runs.items()},
            "differences_b_minus_a": {k: e.as_dict() for k, e in self.differences.items()},
            "baseline": self.baseline.as_dict() if self.baseline else None,
            "per_class_recall": {
                label: {r: e.as_dict() for r, e in runs.items()}
                for label, runs in self.recall.items()
            }
            if self.recall is not None
            else None,
        }


def intervals(
    cells: PairedCells,
    positive: Iterable[str],
    boot: Bootstrap,
    kappa: float | None,
    baseline: tuple[int, int] | None = None,
) -> Intervals:
    """Every interval of a comparison. `kappa` is compare/stats' point value (the bootstrap
    gives only its interval); `baseline` the majority-class baseline's (correct, n)."""
    pos = frozenset(normalise(p) for p in positive)
    gold = any(c[2] is not None for c in cells.keys)
    resampled = cells.resample(boot)
    observed = cells.observed()
    agree = int(cells.total(observed, lambda c: c[0] == c[1])[0])
    names = figures_for(gold)
    labels = sorted({c[2] for c in cells.keys if c[2] is not None})
    steps = {c[0] for c in cells.keys} | {c[1] for c in cells.keys} | set(labels)
    return Intervals(
        boot=boot,
        agreement=wilson(agree, cells.n),
        kappa=bootstrapped(kappa, kappa_rows(cells, resampled)),
        runs={
            run: {f: run_figure(cells, f, index, pos) for f in names}
            for index, run in enumerate(RUNS)
        },
        differences={f: difference(cells, resampled, f, pos) for f in names},
        baseline=wilson(*baseline) if baseline is not None else None,
        recall={
            label: {run: class_recall(cells, index, label) for index, run in enumerate(RUNS)}
            for label in labels
        }
        if gold and len(steps) > 2
        else None,
    )
