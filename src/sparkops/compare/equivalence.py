"""The equivalence verdict between two runs: `sparkops compare --margin 2%` (issue 40 item 2).

A changed quantisation, prompt, constraint mode or serving setup is acceptable when a figure
moves by less than the margin the researcher accepts. "No significant difference" does not say
that (a small study shows no difference about anything); an equivalence test does. For each
figure both runs share the records of (the positive rate over the paired records; against gold
labels accuracy, sensitivity over the gold positives, specificity over the gold negatives), the
paired difference B - A is tested three ways:

- **equivalent within m points**: a paired two one-sided test (TOST, Schuirmann 1987) at 5%
  each side, i.e. the 90% interval of the difference lies inside (-m, +m). The test is the
  z-test on the per-record differences of the two runs' 0/1 outcomes, exactly statsmodels'
  `ztost(d, -m, m)` (the tests check it). With no record whose outcome differs the difference
  has no variance to test; then the exact bound is used: |B - A| is at most the share of
  discordant records, and with none among n the one-sided 95% upper bound of that share is
  1 - 0.05^(1/n) (p = (1 - m)^n).
- **different**: the exact McNemar test on the figure's discordant records, p < 0.05 (the
  test compare prints for paired decisions and correctness).
- **not shown either way**, with about how many records would settle it: at 80% power, for
  TOST when the observed difference is inside the margin, n = ((z_0.95 + z_0.8) s / (m - |d|))^2
  (z_0.9 for the power term when d is 0), else for the difference n = ((z_0.975 + z_0.8) s /
  |d|)^2, s the per-record standard deviation of the differences (Chow, Shao & Wang, Sample
  Size Calculations in Clinical Research, 3.1-3.2), scaled from the figure's records (e.g. gold
  positives) to paired records at the share they have now, and never fewer than one more than
  now.

Differences are B - A throughout, in percentage points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from sparkops.compare.intervals import (
    FIGURE_NAMES,
    Cell,
    PairedCells,
    figure_tests,
    figures_for,
)
from sparkops.compare.stats import mcnemar, normalise
from sparkops.errors import UserError

ALPHA = 0.05
POWER = 0.8
EQUIVALENT = "equivalent"
DIFFERENT = "different"
NOT_SHOWN = "not shown"
NO_VERDICT = "no verdict"
# Figures whose two runs are scored over the same records (PPV and NPV are not: each run's
# own positive or negative answers are their records, so a paired test does not apply).
PAIRED_FIGURES = ("positive_rate", "accuracy", "sensitivity", "specificity")
_MARGIN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
SMALLEST_MARGIN = 0.001  # 0.1 points
LARGEST_MARGIN = 0.5


def parse_margin(text: str) -> float:
    """`--margin 2%` as the fraction 0.02. The % sign is required: `2` could be 2 points or
    200%, `0.02` 0.02 points or 2 points, and a margin read the wrong way turns a verdict."""
    match = _MARGIN.match(text)
    if match is None:
        raise UserError(
            f"--margin {text!r} is not a margin in percentage points; write it with a % sign, "
            "e.g. --margin 2% (the largest difference B - A you accept in a figure)"
        )
    margin = float(match.group(1)) / 100
    if margin < SMALLEST_MARGIN:
        hint = f" (did you mean {match.group(1)} as a fraction: {float(match.group(1)):.0%}?)"
        raise UserError(
            f"--margin {text.strip()} is below 0.1 points{hint if margin > 0 else ''}; pass the "
            "difference you accept in percentage points, e.g. --margin 2%"
        )
    if margin > LARGEST_MARGIN:
        raise UserError(
            f"--margin {text.strip()} accepts differences above 50 points, which no figure "
            "between 0% and 100% can be equivalent within in any useful sense; pass the "
            "difference you accept, e.g. --margin 2%"
        )
    return margin


def points(margin: float) -> str:
    """0.02 -> "2", 0.025 -> "2.5": the margin as the verdict says it."""
    return f"{100 * margin:.2f}".rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Paired:
    """One figure's records: `n` of them, `b` where only A's outcome holds (A positive, A
    correct), `c` where only B's does; the difference B - A is (c - b) / n."""

    n: int
    b: int
    c: int

    @property
    def difference(self) -> float | None:
        return (self.c - self.b) / self.n if self.n else None

    @property
    def sd(self) -> float:
        """The sample standard deviation (ddof 1) of the per-record differences (-1, 0, +1)."""
        if self.n < 2:
            return 0.0
        mean = (self.c - self.b) / self.n
        return math.sqrt(max(0.0, (self.b + self.c - self.n * mean * mean) / (self.n - 1)))


def paired_counts(cells: PairedCells, figure: str, positive: frozenset[str]) -> Paired:
    """The figure's records and its discordant counts, from the paired cells."""
    a_num, den = figure_tests(figure, 0, positive)
    b_num, _ = figure_tests(figure, 1, positive)
    observed = cells.observed()

    def only(first: Any, second: Any) -> int:
        def test(c: Cell) -> bool:
            return den(c) and first(c) and not second(c)

        return int(cells.total(observed, test)[0])

    return Paired(int(cells.total(observed, den)[0]), only(a_num, b_num), only(b_num, a_num))


@dataclass(frozen=True)
class Verdict:
    """One figure's verdict, with the figures that gave it."""

    figure: str
    margin: float
    n: int
    difference: float | None
    verdict: str
    p_tost: float | None = None
    ci90: tuple[float, float] | None = None
    tost_method: str = ""
    p_mcnemar: float | None = None
    needed: int | None = None  # paired records that would settle it, about (not shown only)
    now: int = 0  # paired records now

    def text(self) -> str:
        """The verdict in words."""
        m = points(self.margin)
        if self.verdict == EQUIVALENT:
            also = (
                f" (the difference is real but smaller: McNemar p = {self.p_mcnemar:.3g})"
                if self.p_mcnemar is not None and self.p_mcnemar < ALPHA
                else ""
            )
            return f"equivalent within {m} points{also}"
        if self.verdict == DIFFERENT:
            assert self.difference is not None
            way = "higher" if self.difference > 0 else "lower"
            return f"different (B {way} by {abs(100 * self.difference):.1f} points)"
        if self.verdict == NOT_SHOWN:
            return (
                f"not shown either way: more records needed, about {self.needed:,} "
                f"(now {self.now:,})"
            )
        return "no verdict: no record to compare on"

    def as_dict(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "margin": self.margin,
            "records": self.n,
            "difference_b_minus_a": self.difference,
            "verdict": self.verdict,
            "text": self.text(),
            "tost_p": self.p_tost,
            "tost_ci90": list(self.ci90) if self.ci90 else None,
            "tost_method": self.tost_method,
            "mcnemar_p": self.p_mcnemar,
            "records_needed": self.needed,
        }


def tost(pair: Paired, margin: float) -> tuple[float, tuple[float, float], str]:
    """The paired TOST's p-value, 90% interval and method (module docstring)."""
    d = pair.difference or 0.0
    se = pair.sd / math.sqrt(pair.n)
    if se == 0.0:
        p = (1 - margin) ** pair.n if pair.b + pair.c == 0 else 1.0
        bound = 1 - ALPHA ** (1 / pair.n)
        return p, (-bound, bound), "exact bound (no discordant record)"
    normal = NormalDist()
    p_low = 1 - normal.cdf((d + margin) / se)
    p_high = normal.cdf((d - margin) / se)
    z = normal.inv_cdf(1 - ALPHA)
    return max(p_low, p_high), (d - z * se, d + z * se), "paired z TOST"


def needed(pair: Paired, margin: float, share: float, now: int) -> int:
    """About how many paired records would settle the question at 80% power (docstring)."""
    normal = NormalDist()
    d = abs(pair.difference or 0.0)
    s = pair.sd
    if s == 0.0:  # no discordance: the exact bound shrinks as 1 - 0.05^(1/n)
        n_figure = math.log(ALPHA) / math.log(1 - margin)
    elif d < margin:
        beta = (1 - POWER) / 2 if d == 0 else 1 - POWER
        n_figure = ((normal.inv_cdf(1 - ALPHA) + normal.inv_cdf(1 - beta)) * s / (margin - d)) ** 2
    else:
        n_figure = ((normal.inv_cdf(1 - ALPHA / 2) + normal.inv_cdf(POWER)) * s / d) ** 2
    total = max(math.ceil(n_figure / share), now + 1)
    return round_up(total)


def round_up(n: int) -> int:
    """Up to two significant figures: about 1,234 -> 1,300."""
    if n < 100:
        return n
    step = 10 ** (len(str(n)) - 2)
    return -(-n // step) * step


def verdict(cells: PairedCells, figure: str, positive: frozenset[str], margin: float) -> Verdict:
    """One figure's equivalence verdict within `margin` (a fraction)."""
    pair = paired_counts(cells, figure, positive)
    now = cells.n
    if pair.n == 0:
        return Verdict(figure, margin, 0, None, NO_VERDICT, now=now)
    p, ci90, method = tost(pair, margin)
    p_mcnemar = mcnemar(pair.b, pair.c).p_exact
    if p < ALPHA:
        outcome = EQUIVALENT
    elif p_mcnemar < ALPHA:
        outcome = DIFFERENT
    else:
        outcome = NOT_SHOWN
    return Verdict(
        figure,
        margin,
        pair.n,
        pair.difference,
        outcome,
        p,
        ci90,
        method,
        p_mcnemar,
        needed(pair, margin, pair.n / now, now) if outcome == NOT_SHOWN else None,
        now,
    )


def verdicts(cells: PairedCells, positive: Iterable[str], margin: float) -> list[Verdict]:
    """A verdict for every paired figure the comparison has (gold figures with gold only)."""
    pos = frozenset(normalise(p) for p in positive)
    gold = any(c[2] is not None for c in cells.keys)
    names = [f for f in figures_for(gold) if f in PAIRED_FIGURES]
    return [verdict(cells, f, pos, margin) for f in names]


def figure_name(figure: str) -> str:
    return FIGURE_NAMES.get(figure, figure)
