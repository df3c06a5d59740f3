"""`sparkops compare` on constructed runs whose answers are worked out by hand."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from sparkops.compare import cli
from sparkops.compare.runs import load_gold, load_run
from sparkops.compare.stats import against_gold, cohen_kappa, compare_decisions, mcnemar
from sparkops.errors import UserError

GOLD = {str(i): "yes" if i <= 5 else "no" for i in range(1, 11)}
# A misses 5 (FN) and flags 6 (FP); B misses 1 and 2, gets 5, and also flags 6.
YES = {"y": "yes", "n": "no"}
RUN_A = {str(i): YES[v] for i, v in enumerate("yyyynynnnn", start=1)}
RUN_B = {str(i): YES[v] for i, v in enumerate("nnyyyynnnn", start=1)} | {"11": "yes"}


def test_agreement_changed_and_kappa():
    result = compare_decisions(RUN_A, RUN_B)
    assert (result.paired, result.only_a, result.only_b) == (10, 0, 1)
    assert result.agreement == pytest.approx(0.7)
    assert [c.id for c in result.changed] == ["1", "2", "5"]
    assert [(c.a, c.b) for c in result.changed] == [("yes", "no"), ("yes", "no"), ("no", "yes")]
    # observed 0.7, chance (5x4 + 5x6) / 100 = 0.5: kappa = 0.2 / 0.5
    assert result.kappa == pytest.approx(0.4)
    # A positive only: 1, 2; B positive only: 5.
    assert (result.mcnemar_decisions.b, result.mcnemar_decisions.c) == (2, 1)
    assert result.mcnemar_decisions.p_exact == pytest.approx(1.0)


def test_against_gold():
    result = compare_decisions(RUN_A, RUN_B, gold=GOLD)
    assert result.gold_paired == 10
    a, b = result.gold_a, result.gold_b
    assert (a.tp, a.fp, a.tn, a.fn) == (4, 1, 4, 1)
    assert (a.accuracy, a.sensitivity, a.specificity) == (0.8, 0.8, 0.8)
    assert (b.tp, b.fp, b.tn, b.fn) == (3, 1, 4, 2)
    assert (b.accuracy, b.sensitivity, b.specificity) == (0.7, 0.6, 0.8)
    # Only A right on 1 and 2; only B right on 5.
    assert (result.mcnemar_correct.b, result.mcnemar_correct.c) == (2, 1)
    assert [c.gold for c in result.changed] == ["yes", "yes", "yes"]


def test_labels_compare_case_insensitively_and_positive_is_configurable():
    result = compare_decisions(
        {"1": "Stroke ", "2": "mimic"}, {"1": "stroke", "2": "unclear"}, positive=["STROKE"]
    )
    assert result.agreement == 0.5
    assert result.positive == ("stroke",)
    # mimic -> unclear changes the label but both are negative.
    assert (result.mcnemar_decisions.b, result.mcnemar_decisions.c) == (0, 0)


def test_mcnemar_against_textbook_values():
    test = mcnemar(10, 2)
    # exact: 2 x (C(12,0) + C(12,1) + C(12,2)) / 2^12 = 2 x 79 / 4096
    assert test.p_exact == pytest.approx(2 * 79 / 4096)
    assert test.chi2 == pytest.approx(49 / 12)
    assert test.p_chi2 == pytest.approx(0.04330, abs=1e-4)
    assert mcnemar(0, 0).p_exact == 1.0
    assert mcnemar(5, 5).p_exact == 1.0
    assert mcnemar(0, 6).p_exact == pytest.approx(2 / 64)
    assert math.isclose(mcnemar(3, 7).p_exact, mcnemar(7, 3).p_exact)


def test_kappa_edge_cases():
    assert cohen_kappa([]) is None
    # one class in both runs: chance agreement is 1, kappa is 0/0 (undefined), not 1.000
    assert cohen_kappa([("a", "a"), ("a", "a")]) is None
    assert cohen_kappa([("a", "a"), ("b", "b")]) == 1.0
    assert cohen_kappa([("a", "b"), ("b", "a")]) == pytest.approx(-1.0)


def write_run(folder, rows, tail=""):
    folder.mkdir()
    lines = [json.dumps(row) for row in rows]
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n" + tail)
    return folder


def rows_for(decisions):
    return [
        {"id": key, "status": "done", "final": value, "steps": [], "error": None}
        for key, value in decisions.items()
    ]


def test_load_run_counts_errors_and_skips_torn_tail(tmp_path):
    rows = rows_for({"a": "yes", "b": "no"})
    rows.append({"id": "c", "status": "error", "final": None, "steps": [], "error": "400"})
    run = load_run(write_run(tmp_path / "run", rows, tail='{"id": "d", "sta'))
    assert run.decisions == {"a": "yes", "b": "no"}
    assert run.errors == 1


def test_load_run_refuses_a_bad_middle_line(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.jsonl").write_text('{"id": "a", "final": "yes"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(UserError, match="line 2"):
        load_run(folder)
    with pytest.raises(UserError, match="does not exist"):
        load_run(tmp_path / "missing")


def test_load_gold_checks_columns_and_duplicates(tmp_path):
    path = tmp_path / "gold.csv"
    path.write_text("record,truth\n1,yes\n")
    with pytest.raises(UserError, match="no column"):
        load_gold(path)
    assert load_gold(path, "record", "truth") == {"1": "yes"}
    path.write_text("id,label\n1,yes\n1,no\n")
    with pytest.raises(UserError, match="line 3 repeats"):
        load_gold(path)


def test_cli_json_end_to_end(tmp_path, capsys):
    a = write_run(tmp_path / "fp8", rows_for(RUN_A))
    b = write_run(tmp_path / "int4", rows_for(RUN_B))
    gold = tmp_path / "gold.csv"
    gold.write_text("id,label\n" + "".join(f"{k},{v}\n" for k, v in GOLD.items()))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["compare", str(a), str(b), "--gold", str(gold), "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["agreement"] == pytest.approx(0.7)
    assert out["changed_count"] == 3
    assert out["gold_a"]["accuracy"] == 0.8 and out["gold_b"]["sensitivity"] == 0.6
    assert out["mcnemar_correct"]["b"] == 2


def test_cli_table(tmp_path, capsys):
    a = write_run(tmp_path / "a", rows_for(RUN_A))
    b = write_run(tmp_path / "b", rows_for(RUN_B))
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["compare", str(a), str(b / "results.jsonl")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "70.0%" in out and "Changed decisions" in out


def run_cli(*argv):
    """The installed `sparkops` entry point in a subprocess: exit status and output as a user
    sees them."""
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "import sys; from sparkops.cli import main; sys.exit(main())"]
    return subprocess.run([*cmd, *argv], capture_output=True, text=True, timeout=60)


def test_cli_refuses_runs_with_no_record_in_common(tmp_path):
    a = write_run(tmp_path / "a", rows_for({"1": "yes", "2": "no"}))
    b = write_run(tmp_path / "b", rows_for({"3": "yes"}))
    done = run_cli("compare", str(a), str(b))
    assert done.returncode == 2, done
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkops: error: no record is decided in both")
    assert done.stdout == ""
    # every record an error in one run: nothing paired either
    errors = rows_for({"1": "yes"})
    errors[0].update(status="error", final=None)
    c = write_run(tmp_path / "c", errors)
    assert run_cli("compare", str(a), str(c), "--json").returncode == 2


def test_cli_shows_kappa_undefined_when_both_runs_give_one_class(tmp_path):
    a = write_run(tmp_path / "a", rows_for({str(i): "yes" for i in range(5)}))
    b = write_run(tmp_path / "b", rows_for({str(i): "Yes " for i in range(5)}))
    table = run_cli("compare", str(a), str(b))
    assert table.returncode == 0, table
    assert "undefined" in table.stdout and "1.000" not in table.stdout
    as_json = json.loads(run_cli("compare", str(a), str(b), "--json").stdout)
    assert as_json["kappa"] is None and as_json["agreement"] == 1.0


def test_against_gold_scores_one_run_over_the_records_that_have_both() -> None:
    decisions = {"a": "Yes", "b": "no", "c": "unclear", "d": "yes", "extra": "yes"}
    gold = {"a": "yes", "b": "yes", "c": "no", "d": "no", "unjudged": "yes"}
    conf = against_gold(decisions, gold)
    assert (conf.n, conf.tp, conf.fn, conf.tn, conf.fp) == (4, 1, 1, 1, 1)
    assert conf.sensitivity == conf.specificity == 0.5


def write_gold(path, gold):
    path.write_text("id,label\n" + "".join(f"{k},{v}\n" for k, v in gold.items()))
    return path


def test_cli_refuses_a_positive_label_no_decision_uses_against_gold(tmp_path):
    # a last step answering now/later, scored against yes/no gold: sensitivity would read 0%
    later = {str(i): "now" if i <= 3 else "later" for i in range(1, 11)}
    a = write_run(tmp_path / "a", rows_for(later))
    b = write_run(tmp_path / "b", rows_for(later)[::-1])
    gold = write_gold(tmp_path / "gold.csv", GOLD)
    done = run_cli("compare", str(a), str(b), "--gold", str(gold))
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.strip() == (
        "sparkops: error: gold label(s) no are not the step's labels, so each would count as "
        "negative whatever it means: gold labels seen: no 5, yes 5 vs the step's labels "
        "(decisions of either run, and --positive): later 14, now 6, yes 0 (--positive); map "
        "each one explicitly, e.g. --gold-map no=LABEL (LABEL one of: later, now, yes; a label "
        "the step has but neither run decided maps to itself), or write the gold file in the "
        "step's labels"
    )
    # --positive alone was taken before, scoring every gold label (yes, no) as negative
    positive_only = run_cli("compare", str(a), str(b), "--gold", str(gold), "--positive", "now")
    assert positive_only.returncode == 2 and "gold label(s) no, yes are not" in positive_only.stderr
    fixed = run_cli(
        "compare", str(a), str(b), "--gold", str(gold), "--positive", "now",
        "--gold-map", "yes=now,no=later", "--json",
    )  # fmt: skip
    assert fixed.returncode == 0 and "sparkops: warning" not in fixed.stderr, fixed
    assert json.loads(fixed.stdout)["gold_a"]["accuracy"] == 0.8  # now on 1-3 of yes 1-5
    # gold labels that are all an undecided positive label: still refused, as before
    all_yes = write_gold(tmp_path / "yes.csv", {str(i): "yes" for i in range(1, 11)})
    done = run_cli("compare", str(a), str(b), "--gold", str(all_yes))
    assert done.returncode == 2 and done.stderr.strip() == (
        "sparkops: error: --positive yes matches no decision in either run (decisions: "
        "later 14, now 6), and no decision is a gold label (yes): every record would "
        "count as negative; pass --positive with the decision that means positive "
        "(repeatable), or gold labels in the pipeline's own labels"
    ), done


def test_cli_warns_when_no_decision_is_positive_but_labels_match_gold(tmp_path):
    a = write_run(tmp_path / "a", rows_for({str(i): "no" for i in range(1, 11)}))
    # other order: a byte-for-byte copy of a would add the same-job warning
    b = write_run(tmp_path / "b", rows_for({str(i): "no" for i in range(10, 0, -1)}))
    gold = write_gold(tmp_path / "gold.csv", GOLD)
    done = run_cli("compare", str(a), str(b), "--gold", str(gold), "--json")
    assert done.returncode == 0, done
    warning = (
        "--positive yes matches no decision in either run (decisions: no 20): every record "
        "counts as negative"
    )
    assert done.stderr.strip() == f"sparkops: warning: {warning}"
    assert json.loads(done.stdout)["warnings"] == [warning]


def test_unclear_is_its_own_row_and_each_label_says_how_it_was_counted(tmp_path):
    run_a = RUN_A | {"9": "unclear", "10": "Unclear"}
    a = write_run(tmp_path / "a", rows_for(run_a))
    b = write_run(tmp_path / "b", rows_for(RUN_B))
    gold = write_gold(tmp_path / "gold.csv", GOLD)
    as_json = json.loads(run_cli("compare", str(a), str(b), "--gold", str(gold), "--json").stdout)
    assert as_json["labels"] == [
        {"label": "yes", "a": 5, "b": 4, "gold": 5, "positive": True, "counted_as": "positive"},
        {"label": "no", "a": 3, "b": 6, "gold": 5, "positive": False, "counted_as": "negative"},
        {"label": "unclear", "a": 2, "b": 0, "gold": 0, "positive": False,
         "counted_as": "negative"},
    ]  # fmt: skip
    table = run_cli("compare", str(a), str(b), "--gold", str(gold))
    assert table.returncode == 0, table
    rows = [" ".join(line.replace("│", " ").split()) for line in table.stdout.splitlines()]
    assert "How each decision was counted (10 paired records)" in rows
    assert "unclear 2 0 0 negative (not a --positive label)" in rows
    assert "yes 5 4 5 positive (--positive)" in rows
