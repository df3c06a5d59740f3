"""`sparkops compare --margin 2%` (issue 40 item 2): the paired TOST against statsmodels'
ztost, McNemar against scipy's binomial test, and the verdict in words."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.weightstats import DescrStatsW, ztost

from sparkops.compare.equivalence import (
    DIFFERENT,
    EQUIVALENT,
    NOT_SHOWN,
    Paired,
    parse_margin,
    round_up,
    tost,
    verdict,
    verdicts,
)
from sparkops.compare.intervals import PairedCells
from sparkops.errors import UserError
from tests.plugins.cli import sparkops
from tests.unit.test_compare_intervals import synthetic, write_gold, write_run

NO_COLUMNS = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
YES = frozenset({"yes"})


def paired_runs(n: int, only_a: int, only_b: int, both: int = 0):
    """n records: `only_a` positive in A alone, `only_b` in B alone, `both` in both."""
    a, b = {}, {}
    for i in range(n):
        key = str(i)
        a[key] = "yes" if i < only_a or only_a + only_b <= i < only_a + only_b + both else "no"
        b[key] = "yes" if only_a <= i < only_a + only_b + both else "no"
    return a, b


def differences(pair: Paired) -> np.ndarray:
    """The per-record differences B - A the test is on (+1, -1, 0)."""
    return np.array([1.0] * pair.c + [-1.0] * pair.b + [0.0] * (pair.n - pair.b - pair.c))


@pytest.mark.parametrize(
    ("n", "b", "c", "margin"),
    [
        (300, 8, 6, 0.02),
        (300, 1, 0, 0.02),
        (2000, 30, 25, 0.02),
        (120, 9, 2, 0.05),
        (50, 3, 3, 0.1),
    ],
)
def test_tost_is_statsmodels_ztost_on_the_per_record_differences(n, b, c, margin):
    pair = Paired(n, b, c)
    p, (low, high), method = tost(pair, margin)
    reference, _, _ = ztost(differences(pair), -margin, margin)
    assert method == "paired z TOST"
    assert p == pytest.approx(reference, rel=1e-9, abs=1e-15)
    ref_low, ref_high = DescrStatsW(differences(pair)).zconfint_mean(alpha=0.10)
    assert (low, high) == (pytest.approx(ref_low), pytest.approx(ref_high))
    assert (p < 0.05) == (-margin < low and high < margin)  # TOST is the 90% interval inside


def test_no_discordant_record_uses_the_exact_bound():
    # 300 records, none differing: |B - A| <= 0 of 300 discordant, bound 1 - 0.05^(1/300)
    p, (low, high), method = tost(Paired(300, 0, 0), 0.02)
    assert method == "exact bound (no discordant record)"
    assert high == pytest.approx(1 - 0.05 ** (1 / 300)) and low == -high
    assert p == pytest.approx(0.98**300) and p < 0.05
    a, b = paired_runs(100, 0, 0, both=30)
    found = verdict(PairedCells.of(a, b), "positive_rate", YES, 0.02)
    # 100 records cannot bound it under 2 points: 1 - 0.05^(1/100) = 2.95%
    assert found.verdict == NOT_SHOWN
    # ln(0.05) / ln(0.98) = 148.3 -> 149 -> about 150
    assert found.needed == 150
    assert found.text() == "not shown either way: more records needed, about 150 (now 100)"


def rate_verdict(*counts):
    """The positive rate's verdict within 2 points for `paired_runs(*counts)`."""
    return verdict(PairedCells.of(*paired_runs(*counts)), "positive_rate", YES, 0.02)


def test_equivalent_different_and_not_shown_in_words():
    equivalent = rate_verdict(2000, 12, 10, 500)
    assert equivalent.verdict == EQUIVALENT
    assert equivalent.text() == "equivalent within 2 points"
    different = rate_verdict(300, 25, 5, 60)
    assert different.verdict == DIFFERENT
    assert different.p_mcnemar == pytest.approx(binomtest(5, 30, 0.5).pvalue)
    assert different.text() == "different (B lower by 6.7 points)"
    unsure = rate_verdict(300, 8, 6, 60)
    assert unsure.verdict == NOT_SHOWN and unsure.needed is not None and unsure.needed > 300
    assert unsure.text() == (
        f"not shown either way: more records needed, about {unsure.needed:,} (now 300)"
    )
    # a real difference smaller than the margin: equivalent, and said to be real
    small = rate_verdict(20000, 150, 60, 5000)
    assert small.verdict == EQUIVALENT and small.p_mcnemar < 0.05
    assert small.text().startswith("equivalent within 2 points (the difference is real but smaller")


@pytest.mark.parametrize(("b", "c"), [(8, 6), (10, 10), (4, 9)])
def test_the_records_needed_would_show_equivalence_if_the_proportions_held(b, c):
    """Scaled to the records it names, the same cell proportions give TOST p < 0.05 (the
    power it is sized for is 80%, so the observed difference itself passes)."""
    a, bb = paired_runs(300, b, c, 60)
    found = verdict(PairedCells.of(a, bb), "positive_rate", YES, 0.02)
    assert found.verdict == NOT_SHOWN
    scale = found.needed / 300
    bigger = Paired(found.needed, round(b * scale), round(c * scale))
    assert tost(bigger, 0.02)[0] < 0.05
    # the sample-size formula (Chow, Shao & Wang 3.1): z_0.95 + z_0.8 (z_0.9 when d = 0)
    pair = Paired(300, b, c)
    d = abs((c - b) / 300)
    power_z = 1.2815515655446004 if d == 0 else 0.8416212335729143
    n = ((1.6448536269514722 + power_z) * pair.sd / (0.02 - d)) ** 2
    assert found.needed == round_up(max(math.ceil(n), 301))


def test_gold_figures_are_tested_over_their_own_records():
    a, b, gold = synthetic(n=400, seed=3)
    cells = PairedCells.of(a, b, gold)
    found = {v.figure: v for v in verdicts(cells, ["yes"], 0.05)}
    assert list(found) == ["positive_rate", "accuracy", "sensitivity", "specificity"]
    positives = [k for k in a if gold[k] == "yes"]
    assert found["sensitivity"].n == len(positives)
    assert found["specificity"].n == 400 - len(positives)
    right_a = np.array([float(a[k] == "yes") for k in positives])
    right_b = np.array([float(b[k] == "yes") for k in positives])
    reference, _, _ = ztost(right_b - right_a, -0.05, 0.05)
    assert found["sensitivity"].p_tost == pytest.approx(reference)
    correct_a = np.array([float((a[k] == "yes") == (gold[k] == "yes")) for k in sorted(a)])
    correct_b = np.array([float((b[k] == "yes") == (gold[k] == "yes")) for k in sorted(a)])
    reference, _, _ = ztost(correct_b - correct_a, -0.05, 0.05)
    assert found["accuracy"].p_tost == pytest.approx(reference)
    # without gold, only the positive rate
    assert [v.figure for v in verdicts(PairedCells.of(a, b), ["yes"], 0.05)] == ["positive_rate"]


def test_margin_needs_a_percent_sign_and_a_sensible_size():
    assert parse_margin("2%") == pytest.approx(0.02)
    assert parse_margin(" 2.5 % ") == pytest.approx(0.025)
    refusals = {
        "2": "--margin '2' is not a margin in percentage points; write it with a % sign, e.g. "
        "--margin 2% (the largest difference B - A you accept in a figure)",
        "0.02": "--margin '0.02' is not a margin",
        "-2%": "--margin '-2%' is not a margin",
        "0.02%": "--margin 0.02% is below 0.1 points (did you mean 0.02 as a fraction: 2%?)",
        "0%": "--margin 0% is below 0.1 points; pass",
        "60%": "--margin 60% accepts differences above 50 points",
    }
    for given, said in refusals.items():
        with pytest.raises(UserError) as raised:
            parse_margin(given)
        assert str(raised.value).startswith(said), (given, str(raised.value))


def test_cli_margin_prints_a_verdict_per_figure_and_json_holds_them(tmp_path):
    a, b, gold = synthetic()
    args = [
        "compare",
        str(write_run(tmp_path / "a", a)),
        str(write_run(tmp_path / "b", b)),
        "--gold",
        str(write_gold(tmp_path / "gold.csv", gold)),
        "--margin",
        "2%",
    ]
    done = sparkops(*args, "--json", env=NO_COLUMNS, timeout=120)
    assert done.returncode == 0, done
    out = json.loads(done.stdout)["equivalence"]
    assert out["margin"] == 0.02
    figures = [v["figure"] for v in out["verdicts"]]
    assert figures == ["positive_rate", "accuracy", "sensitivity", "specificity"]
    cells = PairedCells.of(a, b, gold)
    for found in out["verdicts"]:
        expected = verdict(cells, found["figure"], YES, 0.02)
        assert found["text"] == expected.text() and found["tost_p"] == expected.p_tost
    table = sparkops(*args, env=NO_COLUMNS, timeout=120)
    assert table.returncode == 0, table
    rows = [" ".join(line.replace("│", " ").split()) for line in table.stdout.splitlines()]
    assert "Equivalence of B and A within 2 points (--margin)" in rows
    accuracy = verdict(cells, "accuracy", YES, 0.02)
    assert any(r.startswith("accuracy 300 ") and r.endswith(accuracy.text()) for r in rows)
    assert any(r.startswith("Equivalence: paired two one-sided tests") for r in rows)


def test_cli_refuses_a_margin_without_a_percent_sign_before_reading_anything(tmp_path):
    missing = str(tmp_path / "nope")
    done = sparkops("compare", missing, missing, "--margin", "2", env=NO_COLUMNS, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.strip().splitlines() == [
        "sparkops: error: --margin '2' is not a margin in percentage points; write it with a % "
        "sign, e.g. --margin 2% (the largest difference B - A you accept in a figure)"
    ]
