"""`sparkops compare` and the demo against gold labels a newcomer gives (issue 37 items 8, 16).

Gold labels in other words (a spreadsheet's TRUE/FALSE against yes/no decisions), gold ids that
match no record and a job compared with itself each gave a confident figure without a word; an
accuracy stood alone without the majority-class baseline it has to beat. The runs here are the
issue's: 300 notes, 93 gold "yes", and decisions "no" to 296 of them (accuracy 69.0%, which
today's code reported as 98.7% against TRUE/FALSE gold).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil

import pytest
from rich.console import Console
from statsmodels.stats.proportion import proportion_confint

from sparkops.compare.stats import Confusion, baseline_text, confusion, no_better_text
from sparkops.local.demo import print_decisions
from sparkops.samples import GOLD as SAMPLE_GOLD
from tests.plugins.cli import sparkops
from tests.unit.test_compare import rows_for, write_gold, write_run

NO_COLUMNS = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped: rows stay whole

IDS = [str(i) for i in range(1, 301)]
TRUTH = {rid: "yes" if int(rid) <= 93 else "no" for rid in IDS}
SPREADSHEET = {rid: "TRUE" if label == "yes" else "FALSE" for rid, label in TRUTH.items()}
# A: yes to 1, 2 (right) and 94, 95 (wrong): 207 of 300 right, 69.0%, the baseline exactly.
# B: yes to 1, 2, 3 (right) and 94 (wrong): 209 of 300, 69.7%.
RUN_A = {rid: "yes" if rid in {"1", "2", "94", "95"} else "no" for rid in IDS}
RUN_B = {rid: "yes" if rid in {"1", "2", "3", "94"} else "no" for rid in IDS}
NOTE = "Patient found on the floor, slurred speech"  # record text: never in any output


def run_cli(*argv: str):
    """`sparkops` as a user runs it, piped (tables whole), no traceback or asyncio noise."""
    return sparkops(*argv, env=NO_COLUMNS, timeout=120)


def runs(tmp_path):
    """Runs A and B as job folders whose steps hold the notes' raw answers (record text)."""
    folders = []
    for name, decisions in (("a", RUN_A), ("b", RUN_B)):
        rows = rows_for(decisions)
        for row in rows:
            row["steps"] = [{"step": "screen", "raw": f"{NOTE}: {row['final']}"}]
        folders.append(str(write_run(tmp_path / name, rows)))
    return folders


def one_line(done):
    """The single stderr line of a refusal, after checking the refusal's shape."""
    assert done.returncode == 2, done
    assert done.stdout == "" and "Traceback" not in done.stderr, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert NOTE not in lines[0]
    return lines[0]


REFUSAL = (
    "sparkops: error: gold label(s) FALSE, TRUE are not the step's labels, so each would count "
    "as negative whatever it means: gold labels seen: FALSE 207, TRUE 93 vs the step's labels "
    "(decisions of either run, and --positive): no 592, yes 8; map each one explicitly, e.g. "
    "--gold-map FALSE=LABEL,TRUE=LABEL (LABEL one of: no, yes; a label the step has but "
    "neither run decided maps to itself), or write the gold file in the step's labels"
)


def test_spreadsheet_true_false_gold_is_refused_with_both_vocabularies(tmp_path):
    a, b = runs(tmp_path)
    gold = write_gold(tmp_path / "gold.csv", SPREADSHEET)
    for extra in ((), ("--json",)):
        done = run_cli("compare", a, b, "--gold", str(gold), *extra)
        assert one_line(done) == REFUSAL
        assert "98.7" not in done.stdout + done.stderr


def test_gold_map_gives_the_true_accuracy(tmp_path):
    a, b = runs(tmp_path)
    gold = str(write_gold(tmp_path / "gold.csv", SPREADSHEET))
    for spelling, as_given in (
        (["--gold-map", "TRUE=yes,FALSE=no"], {"TRUE": "yes", "FALSE": "no"}),
        (["--gold-map", "TRUE=yes", "--gold-map", "FALSE=no"], {"TRUE": "yes", "FALSE": "no"}),
        # gold labels match up to case and surrounding spaces
        (["--gold-map", " true = yes , False=no"], {"true": "yes", "False": "no"}),
    ):
        done = run_cli("compare", a, b, "--gold", gold, *spelling, "--json")
        assert done.returncode == 0 and done.stderr == "", done
        out = json.loads(done.stdout)
        assert out["gold_a"]["accuracy"] == pytest.approx(207 / 300)  # not 296 / 300
        assert out["gold_b"]["accuracy"] == pytest.approx(209 / 300)
        assert (out["gold_a"]["tp"], out["gold_a"]["fn"]) == (2, 91)
        assert out["gold_map"] == as_given
    table = run_cli("compare", a, b, "--gold", gold, "--gold-map", "TRUE=yes,FALSE=no")
    assert table.returncode == 0, table
    rows = [" ".join(line.replace("│", " ").split()) for line in table.stdout.splitlines()]
    assert f"baseline ('no') {said(207, 300)} {said(207, 300)}" in rows
    assert any(r.startswith(f"accuracy {said(207, 300)} ") for r in rows)


def said(count: int, n: int) -> str:
    """A proportion as compare prints it: the figure and its 95% Wilson interval."""
    low, high = proportion_confint(count, n, method="wilson")
    return f"{count / n:.1%} ({100 * low:.1f}-{100 * high:.1f})"


def test_gold_map_mistakes_are_refused_with_the_fix(tmp_path):
    a, b = runs(tmp_path)
    gold = str(write_gold(tmp_path / "gold.csv", SPREADSHEET))
    cases = {
        "TRUE:yes": "sparkops: error: --gold-map 'TRUE:yes' is not GOLD=LABEL: write each gold "
        "label and the step's label it means, e.g. --gold-map TRUE=yes,FALSE=no",
        "TRUE=yes,T=yes,FALSE=no": "sparkops: error: --gold-map names 'T', which the gold file "
        "does not hold (gold labels: FALSE 207, TRUE 93): map the gold file's own labels",
        "TRUE=yes,true=no": "sparkops: error: --gold-map maps 'true' twice ('yes' and 'no'): "
        "keep one",
        # half a map: the label left out is still refused, by name
        "TRUE=yes": REFUSAL.replace(
            "gold label(s) FALSE, TRUE are", "gold label(s) FALSE are"
        ).replace("--gold-map FALSE=LABEL,TRUE=LABEL", "--gold-map FALSE=LABEL"),
    }
    for given, line in cases.items():
        assert one_line(run_cli("compare", a, b, "--gold", gold, "--gold-map", given)) == line
    assert one_line(run_cli("compare", a, b, "--gold-map", "TRUE=yes")) == (
        "sparkops: error: --gold-map reads gold labels: pass --gold labels.csv with it"
    )


def test_a_map_to_a_label_neither_run_decided_is_said(tmp_path):
    # a run that said "yes" to every note: "no" is a label of the step nobody decided
    yes = {rid: "yes" for rid in IDS}
    a = write_run(tmp_path / "a", rows_for(yes))
    b = write_run(tmp_path / "b", rows_for(yes)[::-1])
    gold = str(write_gold(tmp_path / "gold.csv", TRUTH))
    refused = one_line(run_cli("compare", str(a), str(b), "--gold", gold))
    assert refused.startswith("sparkops: error: gold label(s) no are not the step's labels")
    assert "gold labels seen: no 207, yes 93 vs the step's labels" in refused
    done = run_cli("compare", str(a), str(b), "--gold", gold, "--gold-map", "no=no", "--json")
    assert done.returncode == 0, done
    assert done.stderr.strip() == (
        "sparkops: warning: --gold-map maps 'no' to 'no', which neither run decided and no "
        "--positive names: those gold labels count as negative"
    )
    assert json.loads(done.stdout)["gold_a"]["accuracy"] == pytest.approx(93 / 300)


@pytest.mark.parametrize("labels", [("y", "n"), ("1", "0"), ("yes.", "no."), ("Yes", "Nope")])
def test_gold_labels_near_the_step_labels_are_not_read_as_them(tmp_path, labels):
    a, b = runs(tmp_path)
    words = {"yes": labels[0], "no": labels[1]}
    gold = write_gold(tmp_path / "gold.csv", {k: words[v] for k, v in TRUTH.items()})
    line = one_line(run_cli("compare", a, b, "--gold", str(gold)))
    assert line.startswith("sparkops: error: gold label(s) "), line


def test_gold_labels_in_another_case_are_the_same_labels(tmp_path):
    a, b = runs(tmp_path)
    gold = write_gold(tmp_path / "gold.csv", {k: v.upper() for k, v in TRUTH.items()})
    done = run_cli("compare", a, b, "--gold", str(gold), "--json")
    assert done.returncode == 0 and done.stderr == "", done
    assert json.loads(done.stdout)["gold_a"]["accuracy"] == pytest.approx(207 / 300)


def test_a_label_column_holding_text_is_counted_not_printed(tmp_path):
    a, b = runs(tmp_path)
    gold = tmp_path / "gold.csv"
    with gold.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "label", "text"])
        writer.writerows([rid, TRUTH[rid], f"{NOTE} {rid}"] for rid in IDS)
    line = one_line(run_cli("compare", a, b, "--gold", str(gold), "--gold-label-field", "text"))
    assert "gold labels seen: 300 distinct values, not shown" in line
    assert "--gold-map GOLD=LABEL" in line


def test_gold_ids_that_match_no_record_are_refused_without_ids_or_text(tmp_path):
    a, b = runs(tmp_path)
    gold = write_gold(tmp_path / "gold.csv", {f"note-{k}": v for k, v in TRUTH.items()})
    line = one_line(run_cli("compare", a, b, "--gold", str(gold)))
    assert line == (
        f"sparkops: error: no gold id is a record id of either run: {gold} holds 300 ids, run "
        "A 300 decided records, run B 300, and 0 ids in common; check that --gold-id-field "
        "(now 'id') names the column of the records' ids and that the gold labels are for "
        "this input (ids match exactly, as text)"
    )
    assert "note-1" not in line
    padded = write_gold(tmp_path / "padded.csv", {k.zfill(4): v for k, v in TRUTH.items()})
    line = one_line(run_cli("compare", a, b, "--gold", str(padded), "--json"))
    assert "0 ids in common (300 would match if case and leading zeros were ignored" in line
    assert "0001" not in line


def test_gold_ids_of_one_run_only_are_refused(tmp_path):
    a = write_run(tmp_path / "a", rows_for({"1": "yes", "2": "no", "3": "no"}))
    b = write_run(tmp_path / "b", rows_for({"1": "yes", "4": "no"}))
    gold = write_gold(tmp_path / "gold.csv", {"2": "no", "3": "no", "4": "no"})
    assert one_line(run_cli("compare", str(a), str(b), "--gold", str(gold))) == (
        f"sparkops: error: no record decided in both runs has a gold label: {gold} holds 3 "
        "ids, run A 3 decided records, run B 2; 3 gold id(s) match a record of one run only, "
        "so there is nothing to score side by side; compare runs over the input the gold "
        "labels are for"
    )


def test_a_job_compared_with_itself_is_said(tmp_path):
    a, _ = runs(tmp_path)
    gold = str(write_gold(tmp_path / "gold.csv", TRUTH))
    results = f"{a}/results.jsonl"
    same = (
        f"sparkops: warning: run A and run B are the same job ({results}): agreement is 100% by "
        "construction and says nothing about run-to-run noise; compare two runs of the same "
        "input to measure it"
    )
    for other in (a, results):
        done = run_cli("compare", a, other, "--gold", gold)
        assert done.returncode == 0, done
        assert done.stderr.strip() == same
        assert "100.0%" in done.stdout  # still shown: the figures of the one run
    copy = shutil.copytree(a, tmp_path / "copy")
    done = run_cli("compare", a, str(copy), "--json")
    assert done.returncode == 0, done
    warning = (
        f"run A and run B are one job's results byte for byte ({results}, {copy}/results.jsonl:"
        " a copy?): agreement is 100% by construction and says nothing about run-to-run noise; "
        "compare two runs of the same input to measure it"
    )
    assert done.stderr.strip() == f"sparkops: warning: {warning}"
    assert json.loads(done.stdout)["warnings"] == [warning]


def test_compare_shows_the_baseline_and_says_when_a_run_is_no_better(tmp_path):
    a, b = runs(tmp_path)
    gold = str(write_gold(tmp_path / "gold.csv", TRUTH))
    done = run_cli("compare", a, b, "--gold", gold)
    assert done.returncode == 0 and done.stderr == "", done
    lines = done.stdout.splitlines()
    rows = [" ".join(line.replace("│", " ").split()) for line in lines]
    # each figure per run with its 95% Wilson interval; the baseline beside accuracy
    assert any(r.startswith(f"accuracy {said(207, 300)} {said(209, 300)} +0.7 (") for r in rows)
    assert f"baseline ('no') {said(207, 300)} {said(207, 300)}" in rows
    assert any(r.startswith(f"sensitivity {said(2, 93)} {said(3, 93)} +1.1 (") for r in rows)
    assert any(r.startswith(f"specificity {said(205, 207)} {said(206, 207)} +0.5 (") for r in rows)
    assert "TP/FP/TN/FN 2/2/205/91 3/1/206/90" in rows
    assert (
        "Run A: accuracy 69.0% (majority-class baseline 69.0%: always 'no'): no better than "
        "answering 'no' to every record." in lines
    )
    assert not any(line.startswith("Run B: accuracy") for line in lines)  # B beats it
    out = json.loads(run_cli("compare", a, b, "--gold", gold, "--json").stdout)
    assert out["gold_a"]["baseline"] == {"accuracy": 0.69, "answer": "no", "correct": 207}
    assert out["gold_a"]["better_than_baseline"] is False
    assert out["gold_b"]["better_than_baseline"] is True


def test_majority_baseline_counts() -> None:
    positive = frozenset({"yes"})
    # 3 of 4 gold yes: the baseline answers yes; a run right on 3 ties it
    conf = confusion([("yes", "yes"), ("yes", "yes"), ("no", "yes"), ("no", "no")], positive)
    assert (conf.baseline, conf.majority, conf.beats_baseline) == (0.75, "yes", False)
    assert no_better_text(conf) == "no better than answering 'yes' to every record"
    # a tie between the classes goes to the negative one; labels tie alphabetically
    tie = confusion([("yes", "yes"), ("no", "no"), ("no", "unclear")], frozenset({"yes", "x"}))
    assert tie.majority in {"no", "unclear"} and tie.baseline == pytest.approx(2 / 3)
    even = confusion([("yes", "yes"), ("yes", "no")], positive)
    assert (even.majority, even.baseline, even.beats_baseline) == ("no", 0.5, False)
    better = confusion([("yes", "yes"), ("no", "no"), ("no", "no")], positive)
    assert better.beats_baseline and no_better_text(better) is None
    assert baseline_text(better) == "majority-class baseline 66.7%: always 'no'"
    assert no_better_text(Confusion(0, 0, 0, 0, 0)) is None


def demo_output(tmp_path, decide) -> str:
    """What the demo prints about a job whose decisions `decide` gives per gold label."""
    with SAMPLE_GOLD.open(newline="", encoding="utf-8") as handle:
        gold = {row["id"]: row["label"] for row in csv.DictReader(handle)}
    out = write_run(tmp_path / "job", rows_for({k: decide(v) for k, v in gold.items()}))
    console = Console(file=io.StringIO(), width=400)
    print_decisions(out, console)
    return console.file.getvalue()


def test_demo_shows_the_baseline_and_says_when_the_model_is_no_better(tmp_path):
    printed = demo_output(tmp_path, lambda label: "no")
    assert (
        "Against the sample's gold labels (300 records; positive = yes, call the stroke team; "
        f"95% Wilson intervals): sensitivity {said(0, 93)}, specificity {said(207, 207)}, PPV "
        f"n/a, NPV {said(207, 300)}, accuracy {said(207, 300)} (majority-class baseline "
        f"{said(207, 300)}: always 'no'): no better than answering 'no' to every note"
    ) in printed.splitlines()
    low, high = proportion_confint(207, 300, method="wilson")
    assert (
        f"On notes like these the model's accuracy could lie anywhere from {low:.1%} to "
        f"{high:.1%} (95%): 300 notes cannot pin it closer than {100 * (high - low):.0f} points."
    ) in printed.splitlines()


def test_demo_says_nothing_more_when_the_model_beats_the_baseline(tmp_path):
    printed = demo_output(tmp_path, lambda label: label)
    assert (
        f"sensitivity {said(93, 93)}, specificity {said(207, 207)}, PPV {said(93, 93)}, NPV "
        f"{said(207, 207)}, accuracy {said(300, 300)} (majority-class baseline "
        f"{said(207, 300)}: always 'no')"
    ) in printed
    assert "no better" not in printed
