"""`sparkops compare`'s intervals (issue 40 item 1), checked against statsmodels and scipy:
Wilson for every proportion, the paired bootstrap for kappa and every difference B - A."""

from __future__ import annotations

import argparse
import json
import os
import random

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.inter_rater import cohens_kappa
from statsmodels.stats.proportion import proportion_confint

from sparkops.compare import cli
from sparkops.compare.intervals import Bootstrap, PairedCells, intervals, wilson
from sparkops.compare.stats import compare_decisions
from tests.plugins.cli import sparkops

NO_COLUMNS = {k: v for k, v in os.environ.items() if k != "COLUMNS"}


def synthetic(n=300, seed=7, labels=("yes", "no"), prevalence=0.3):
    """Two runs of one model over n records with gold labels: A right 80% of the time, B
    keeping A's decision 90% of the time."""
    rng = random.Random(seed)
    gold, a, b = {}, {}, {}
    for i in range(n):
        truth = labels[0] if rng.random() < prevalence else rng.choice(labels[1:])
        gold[str(i)] = truth
        a[str(i)] = truth if rng.random() < 0.8 else rng.choice([x for x in labels if x != truth])
        b[str(i)] = a[str(i)] if rng.random() < 0.9 else rng.choice(labels)
    return a, b, gold


def write_run(folder, decisions):
    folder.mkdir()
    rows = [
        {"id": k, "status": "done", "final": v, "steps": [], "error": None}
        for k, v in decisions.items()
    ]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def write_gold(path, gold):
    path.write_text("id,label\n" + "".join(f"{k},{v}\n" for k, v in gold.items()))
    return path


def compare_json(tmp_path, a, b, gold=None, *extra):
    """`compare --json` in process over runs written to disk."""
    argv = ["compare", str(write_run(tmp_path / "a", a)), str(write_run(tmp_path / "b", b))]
    if gold is not None:
        argv += ["--gold", str(write_gold(tmp_path / "gold.csv", gold))]
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args([*argv, *extra, "--json"])
    return args


def run_json(tmp_path, capsys, a, b, gold=None, *extra):
    args = compare_json(tmp_path, a, b, gold, *extra)
    assert args.func(args) == 0
    return json.loads(capsys.readouterr().out)


def fresh(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    return folder


def run_cli(*argv):
    """`sparkops` as a user runs it, piped (tables whole)."""
    return sparkops(*argv, env=NO_COLUMNS, timeout=120)


@pytest.mark.parametrize("n", [1, 2, 7, 30, 300, 5000])
def test_wilson_matches_statsmodels_including_0_and_n(n):
    for count in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        low, high = proportion_confint(count, n, alpha=0.05, method="wilson")
        found = wilson(count, n)
        assert found.value == count / n
        assert found.low == pytest.approx(low, abs=1e-12)
        assert found.high == pytest.approx(high, abs=1e-12)
    assert wilson(0, 0).value is None


def test_every_proportion_is_its_confusion_figure_with_statsmodels_wilson(tmp_path, capsys):
    a, b, gold = synthetic()
    out = run_json(tmp_path, capsys, a, b, gold)
    ivs = out["intervals"]
    assert ivs["level"] == 0.95 and ivs["resamples"] == 10_000 and ivs["seed"] == 0
    for run in ("a", "b"):
        conf = out[f"gold_{run}"]
        figures = ivs["runs"][run]
        expected = {
            "accuracy": (conf["tp"] + conf["tn"], conf["n"]),
            "sensitivity": (conf["tp"], conf["tp"] + conf["fn"]),
            "specificity": (conf["tn"], conf["tn"] + conf["fp"]),
            "ppv": (conf["tp"], conf["tp"] + conf["fp"]),
            "npv": (conf["tn"], conf["tn"] + conf["fn"]),
        }
        for name, (count, n) in expected.items():
            found = figures[name]
            assert (found["count"], found["n"], found["method"]) == (count, n, "wilson"), name
            low, high = proportion_confint(count, n, method="wilson")
            assert (found["low"], found["high"]) == (pytest.approx(low), pytest.approx(high))
        for name in ("accuracy", "sensitivity", "specificity"):
            assert figures[name]["value"] == pytest.approx(conf[name])
        assert conf["ppv"] == pytest.approx(figures["ppv"]["value"])
        positives = sum(1 for v in (a if run == "a" else b).values() if v == "yes")
        assert figures["positive_rate"]["count"] == positives
    agreement = ivs["agreement"]
    assert agreement["value"] == pytest.approx(out["agreement"])
    low, high = proportion_confint(agreement["count"], 300, method="wilson")
    assert (agreement["low"], agreement["high"]) == (pytest.approx(low), pytest.approx(high))
    baseline = ivs["baseline"]
    assert baseline["count"] == out["gold_a"]["baseline"]["correct"] and baseline["n"] == 300


def test_differences_match_scipy_paired_bootstrap(tmp_path):
    a, b, gold = synthetic()
    ids = sorted(a)
    pos_a = np.array([a[i] == "yes" for i in ids])
    pos_b = np.array([b[i] == "yes" for i in ids])
    truth = np.array([gold[i] == "yes" for i in ids])
    found = intervals(PairedCells.of(a, b, gold), ["yes"], Bootstrap(), None)

    def accuracy(x, y, t, axis=-1):
        return ((y == t).mean(axis=axis)) - ((x == t).mean(axis=axis))

    def sensitivity(x, y, t, axis=-1):
        return (y & t).sum(axis=axis) / t.sum(axis=axis) - (x & t).sum(axis=axis) / t.sum(axis=axis)

    def ppv(x, y, t, axis=-1):
        return (y & t).sum(axis=axis) / y.sum(axis=axis) - (x & t).sum(axis=axis) / x.sum(axis=axis)

    def rate(x, y, t, axis=-1):
        return y.mean(axis=axis) - x.mean(axis=axis)

    for name, statistic, step in (
        ("accuracy", accuracy, 1 / 300),
        ("sensitivity", sensitivity, 1 / truth.sum()),
        ("ppv", ppv, 1 / pos_a.sum()),
        ("positive_rate", rate, 1 / 300),
    ):
        reference = stats.bootstrap(
            (pos_a, pos_b, truth),
            statistic,
            paired=True,
            vectorized=True,
            method="percentile",
            n_resamples=10_000,
            rng=np.random.default_rng(1),
        ).confidence_interval
        ours = found.differences[name]
        assert ours.method == "bootstrap"
        assert ours.value == pytest.approx(statistic(pos_a, pos_b, truth))
        # a resample's difference moves in steps of one record: the ends agree within one
        assert abs(ours.low - reference.low) <= step + 0.002, name
        assert abs(ours.high - reference.high) <= step + 0.002, name
        assert ours.low < ours.value < ours.high or ours.low == ours.high


def test_kappa_point_is_statsmodels_and_its_interval_scipy_bootstrap():
    a, b, _ = synthetic(labels=("stroke", "mimic", "unclear"), prevalence=0.4)
    ids = sorted(a)
    labels = ["mimic", "stroke", "unclear"]
    table = np.array(
        [[sum(1 for i in ids if a[i] == x and b[i] == y) for y in labels] for x in labels]
    )
    kappa = compare_decisions(a, b).kappa
    assert kappa == pytest.approx(cohens_kappa(table).kappa, abs=1e-12)
    found = intervals(PairedCells.of(a, b), ["stroke"], Bootstrap(), kappa).kappa
    xa, xb = np.array([a[i] for i in ids]), np.array([b[i] for i in ids])

    def kappa_of(index, axis=-1):
        x, y = xa[index], xb[index]
        po = (x == y).mean(axis=-1)
        pe = sum((x == lb).mean(axis=-1) * (y == lb).mean(axis=-1) for lb in labels)
        return (po - pe) / (1 - pe)

    reference = stats.bootstrap(
        (np.arange(len(ids)),),
        kappa_of,
        vectorized=True,
        method="percentile",
        n_resamples=10_000,
        rng=np.random.default_rng(3),
    ).confidence_interval
    assert found.value == kappa and found.method == "bootstrap"
    assert found.low == pytest.approx(reference.low, abs=0.01)
    assert found.high == pytest.approx(reference.high, abs=0.01)


def test_the_seed_fixes_the_intervals_and_resamples_count(tmp_path, capsys):
    a, b, gold = synthetic()
    first = run_json(fresh(tmp_path, "1"), capsys, a, b, gold)
    again = run_json(fresh(tmp_path, "2"), capsys, a, b, gold)
    assert first["intervals"] == again["intervals"]
    other = run_json(fresh(tmp_path, "3"), capsys, a, b, gold, "--seed", "5", "--resamples", "2000")
    assert other["intervals"]["seed"] == 5 and other["intervals"]["resamples"] == 2000
    assert "seed 5" in other["intervals"]["methods"]["bootstrap"]
    ours, theirs = first["intervals"], other["intervals"]
    assert ours["kappa"] != theirs["kappa"]  # another seed, another resampling
    assert ours["runs"] == theirs["runs"]  # Wilson intervals take no seed


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--resamples", "100", "--resamples 100 is outside 1,000 to 1,000,000"),
        ("--seed", "-1", "--seed -1 is negative"),
    ],
)
def test_bad_bootstrap_settings_are_refused_in_one_line(tmp_path, flag, value, said):
    a = write_run(tmp_path / "a", {"1": "yes", "2": "no"})
    b = write_run(tmp_path / "b", {"1": "yes", "2": "yes"})
    done = run_cli("compare", str(a), str(b), flag, value)
    assert done.returncode == 2 and done.stdout == "", done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sparkops: error: {said}")


def test_resamples_where_a_figure_is_undefined_are_counted_and_said(tmp_path, capsys):
    # one gold positive in 20: most resamples draw none, so sensitivity is undefined there
    gold = {str(i): "yes" if i == 0 else "no" for i in range(20)}
    a = {str(i): "yes" if i < 3 else "no" for i in range(20)}
    b = {str(i): "yes" if i < 2 else "no" for i in range(20)}
    out = run_json(tmp_path, capsys, a, b, gold)
    sensitivity = out["intervals"]["differences_b_minus_a"]["sensitivity"]
    # P(no draw of the one positive in 20 draws) = 0.95^20 = 36%
    assert 3_000 < sensitivity["undefined_resamples"] < 4_200
    args = compare_json(fresh(tmp_path, "text"), a, b, gold)
    args.json = False
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert (
        f"sensitivity B - A: undefined in {sensitivity['undefined_resamples']:,} of 10,000 "
        "resamples (left out of its interval)."
    ) in text


def test_per_class_recall_for_a_step_with_three_labels(tmp_path, capsys):
    a, b, gold = synthetic(labels=("stroke", "mimic", "unclear"), prevalence=0.4)
    out = run_json(tmp_path, capsys, a, b, gold, "--positive", "stroke")
    recall = out["intervals"]["per_class_recall"]
    assert set(recall) == {"stroke", "mimic", "unclear"}
    for label, runs in recall.items():
        for run, decisions in (("a", a), ("b", b)):
            of_label = [k for k, v in gold.items() if v == label]
            right = sum(1 for k in of_label if decisions[k] == label)
            assert (runs[run]["count"], runs[run]["n"]) == (right, len(of_label))
            low, high = proportion_confint(right, len(of_label), method="wilson")
            assert (runs[run]["low"], runs[run]["high"]) == (
                pytest.approx(low),
                pytest.approx(high),
            )
    # a two-label step has no per-class table (sensitivity and specificity are it)
    two = run_json(fresh(tmp_path, "two"), capsys, *synthetic())
    assert two["intervals"]["per_class_recall"] is None


def test_the_terminal_says_each_interval_and_its_method(tmp_path):
    a, b, gold = synthetic()
    done = run_cli(
        "compare",
        str(write_run(tmp_path / "a", a)),
        str(write_run(tmp_path / "b", b)),
        "--gold",
        str(write_gold(tmp_path / "gold.csv", gold)),
    )
    assert done.returncode == 0, done
    rows = [" ".join(line.replace("│", " ").split()) for line in done.stdout.splitlines()]
    found = intervals(
        PairedCells.of(a, b, gold), ["yes"], Bootstrap(), compare_decisions(a, b).kappa
    )
    agreement = found.agreement
    said = f"{agreement.value:.1%} ({100 * agreement.low:.1f}-{100 * agreement.high:.1f})"
    assert f"agreement (95% Wilson) {said}" in rows
    kappa = found.kappa
    said = f"{kappa.value:.3f} ({kappa.low:.3f} to {kappa.high:.3f})"
    assert f"Cohen's kappa (95% bootstrap) {said}" in rows
    a_acc, b_acc = found.runs["a"]["accuracy"], found.runs["b"]["accuracy"]
    diff = found.differences["accuracy"]
    assert (
        f"accuracy {a_acc.value:.1%} ({100 * a_acc.low:.1f}-{100 * a_acc.high:.1f}) "
        f"{b_acc.value:.1%} ({100 * b_acc.low:.1f}-{100 * b_acc.high:.1f}) "
        f"{100 * diff.value:+.1f} ({100 * diff.low:+.1f} to {100 * diff.high:+.1f})"
    ) in rows
    conf = compare_decisions(a, b, gold=gold).gold_a
    assert any(r.startswith(f"TP/FP/TN/FN {conf.tp}/{conf.fp}/{conf.tn}/{conf.fn} ") for r in rows)
    assert (
        "95% intervals: Wilson score interval, for every proportion (agreement, positive rate, "
        "accuracy, sensitivity, specificity, PPV, NPV, per-class recall, the baseline); paired "
        "bootstrap (percentile, 10,000 resamples of the paired records, seed 0), for Cohen's "
        "kappa and every difference B - A."
    ) in rows
    assert not any("Equivalence" in r for r in rows)  # no --margin, no verdict
