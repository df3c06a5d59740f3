"""`sparkops compare RUN_A RUN_B [--gold labels.csv]`: the thin edge over compare.stats."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkops.compare.equivalence import parse_margin
from sparkops.compare.evidence import (
    Evidence,
    checked_bootstrap,
    gather,
    print_evidence,
    print_methods,
    print_run_rates,
)
from sparkops.compare.gold import (
    apply_gold_map,
    id_problem,
    label_problem,
    parse_gold_map,
    step_labels,
)
from sparkops.compare.intervals import DEFAULT_RESAMPLES, DEFAULT_SEED
from sparkops.compare.methods import add_methods_option, write_comparison_methods
from sparkops.compare.runs import RunDecisions, load_gold, load_run, same_job
from sparkops.compare.serving import Setup, load_setup, setup_diff
from sparkops.compare.stats import (
    Comparison,
    baseline_text,
    compare_decisions,
    no_better_text,
    positive_problem,
)
from sparkops.console import stdout_console
from sparkops.errors import UserError
from sparkops.jobdir import verification


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="agreement and accuracy of two runs over the same records (e.g. FP8 vs 4-bit)",
        description="Compare two batch runs' decisions: agreement, changed records, accuracy "
        "against gold labels and McNemar's test on the paired decisions, every figure with its "
        "95% interval (Wilson for proportions, a paired bootstrap for kappa and differences), "
        "and with --margin an equivalence verdict.",
    )
    parser.add_argument("run_a", type=Path, help="first run: output directory or results.jsonl")
    parser.add_argument("run_b", type=Path, help="second run: output directory or results.jsonl")
    parser.add_argument("--gold", type=Path, help="CSV of gold labels (columns id,label)")
    parser.add_argument(
        "--gold-id-field", default="id", help="the gold file's column holding each record's id"
    )
    parser.add_argument(
        "--gold-label-field", default="label", help="the gold file's column holding the true label"
    )
    parser.add_argument(
        "--gold-map",
        action="append",
        metavar="GOLD=LABEL[,GOLD=LABEL]",
        help="read a gold label as the step's label (repeatable or comma-separated, e.g. "
        "TRUE=yes,FALSE=no); a gold label that is no decision of either run and no --positive "
        "is refused without it (labels match exactly, up to case and surrounding spaces)",
    )
    parser.add_argument(
        "--positive",
        action="append",
        help="decision meaning positive (repeatable; default: yes); anything else, unclear "
        "included, is negative (the output counts each label in its own row); refused when it "
        "matches no decision and the decisions share no label with --gold",
    )
    parser.add_argument(
        "--margin",
        metavar="POINTS%",
        help="the largest difference B - A you accept in a figure, in percentage points with a "
        "%% sign (e.g. 2%%): adds a verdict per paired figure (positive rate; with --gold "
        "accuracy, sensitivity, specificity): equivalent within it (paired TOST), different "
        "(McNemar), or not shown either way with about how many records would settle it",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=DEFAULT_RESAMPLES,
        help="paired bootstrap resamples for the intervals of kappa and of the differences "
        f"(default {DEFAULT_RESAMPLES:,}; 1,000 or more)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"the bootstrap's random seed (default {DEFAULT_SEED}): the same seed gives the "
        "same intervals",
    )
    add_methods_option(parser)  # --methods [FILE]: the comparison's methods.md (methods.py)
    parser.add_argument("--show", type=int, default=20, help="changed records to list")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    boot = checked_bootstrap(args.resamples, args.seed)
    margin = parse_margin(args.margin) if args.margin is not None else None
    run_a, run_b = load_run(args.run_a), load_run(args.run_b)
    positive = args.positive or ["yes"]
    mapping = parse_gold_map(args.gold_map)
    if mapping and not args.gold:
        raise UserError("--gold-map reads gold labels: pass --gold labels.csv with it")
    warnings = [w for w in (same_job(run_a, run_b), *edited(run_a, run_b)) if w]
    if not run_a.decisions.keys() & run_b.decisions.keys():
        raise UserError(
            f"no record is decided in both runs ({run_a.path}: {len(run_a.decisions)} "
            f"decisions, {run_b.path}: {len(run_b.decisions)}), so there is nothing to "
            "compare; pass two runs over the same input whose records finished"
        )
    gold = None
    if args.gold:
        gold = load_gold(args.gold, args.gold_id_field, args.gold_label_field)
        gold, mapped = checked_gold(gold, args, run_a, run_b, positive, mapping)
        warnings += mapped
    result = compare_decisions(run_a.decisions, run_b.decisions, gold=gold, positive=positive)
    problem = positive_problem(result.labels, result.positive, gold is not None)
    if problem and problem[1]:
        raise UserError(problem[0])
    if problem:
        warnings.append(problem[0])
    for warning in warnings:
        print(f"sparkops: warning: {warning}", file=sys.stderr)
    evidence = gather(result, run_a.decisions, run_b.decisions, gold, positive, boot, margin)
    written = (
        write_comparison_methods(args.methods, run_a, run_b, result, evidence, args.gold, mapping)
        if args.methods is not None
        else None
    )
    setups = (load_setup(args.run_a), load_setup(args.run_b))
    if args.json:
        out = result.as_dict() | evidence.as_dict()
        out["warnings"] = warnings
        out["gold_map"] = mapping
        out["runs"] = {
            name: {"path": str(run.path), "errors": run.errors, "duplicates": run.duplicates}
            for name, run in (("a", run_a), ("b", run_b))
        }
        out["serving"] = serving_json(*setups)
        out["methods"] = str(written) if written else None
        print(json.dumps(out, indent=2))
    else:
        console = stdout_console()
        print_comparison(result, run_a, run_b, args.show, console, setups, evidence)
        if written:
            console.print(f"Methods: {written}", soft_wrap=True)
    return 0


def edited(*runs: RunDecisions) -> list[str]:
    """A warning per run whose job folder does not verify: its results were changed after
    its runs wrote them (jobdir/verification.py; a folder without seals says nothing)."""
    folders = dict.fromkeys(run.path.parent for run in runs)
    return [said for folder in folders if (said := verification.warning(folder)) is not None]


def checked_gold(
    gold: dict[str, str],
    args: argparse.Namespace,
    run_a: RunDecisions,
    run_b: RunDecisions,
    positive: list[str],
    mapping: dict[str, str],
) -> tuple[dict[str, str], list[str]]:
    """The gold labels, mapped by --gold-map, once they can be scored: refused when no paired
    record has one, or when a scored one is no step label and not mapped (compare/gold.py)."""
    problem = id_problem(gold, args.gold, args.gold_id_field, run_a, run_b)
    if problem:
        raise UserError(problem)
    paired = run_a.decisions.keys() & run_b.decisions.keys()
    scored = {rid: label for rid, label in gold.items() if rid in paired}
    decided = step_labels(run_a, run_b)
    problem = label_problem(scored, decided, positive, mapping)
    if problem:
        raise UserError(problem)
    return apply_gold_map(gold, mapping, decided, positive)


def serving_json(a: Setup | None, b: Setup | None) -> dict[str, object]:
    """What differed between the two runs' serving setups (None where a run has no record)."""
    return {
        "recorded": {"a": a is not None, "b": b is not None},
        "changed_during": {
            "a": a.changes_during if a else None,
            "b": b.changes_during if b else None,
        },
        "differences": [c.as_dict() for c in setup_diff(a, b)] if a and b else None,
    }


def print_serving(a: Setup | None, b: Setup | None, console: Console) -> None:
    """The serving setups' differences: the explanation next to the changed decisions."""
    for name, setup in (("A", a), ("B", b)):
        if setup is None:
            console.print(
                f"Run {name} has no serving record (serving.jsonl): its serving setup is unknown.",
                soft_wrap=True,
            )
        elif setup.changes_during:
            console.print(
                f"Run {name}'s serving setup changed {setup.changes_during} time(s) during the "
                "run (see its report): its decisions mix setups.",
                soft_wrap=True,
            )
    if a is None or b is None:
        return
    changes = setup_diff(a, b)
    if not changes:
        console.print(
            f"Serving setups: identical ({len(a.fields)} fields: vLLM version, model, max "
            "length, cache configuration, kit, stack, GPU).",
            soft_wrap=True,
        )
        return
    console.print(f"Serving setup: what differed ({len(changes)} field(s))", soft_wrap=True)
    table = Table()
    for column in ("field", "A", "B"):
        table.add_column(column, overflow="fold")
    for c in changes:
        table.add_row(c.field, _cell(c.before), _cell(c.after))
    console.print(table)


def _cell(value: str | None) -> str:
    return "(absent)" if value is None else (value or "(none)")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _kappa(result: Comparison, evidence: Evidence) -> str:
    if result.kappa is not None:
        return evidence.intervals.kappa.plain()
    return "undefined (both runs gave every record one and the same class)"


def print_labels(result: Comparison, console: Console) -> None:
    """Every decision label in its own row ("unclear" too) and how it was counted."""
    gold = bool(result.gold_a)
    table = Table(title=f"How each decision was counted ({result.paired} paired records)")
    for column in ("decision", "A", "B", *(["gold"] if gold else []), "counted as"):
        table.add_column(
            column, justify="left" if column in ("decision", "counted as") else "right"
        )
    for row in result.labels:
        note = "positive (--positive)" if row.positive else "negative (not a --positive label)"
        cells = [row.label, str(row.a), str(row.b), *([str(row.gold)] if gold else []), note]
        table.add_row(*cells)
    console.print(table)


def print_comparison(
    result: Comparison,
    run_a: RunDecisions,
    run_b: RunDecisions,
    show: int,
    console: Console,
    setups: tuple[Setup | None, Setup | None],
    evidence: Evidence,
) -> None:
    summary = Table(title="Run A vs run B", show_header=False)
    summary.add_row("A", f"{run_a.path} ({len(run_a.decisions)} decisions, {run_a.errors} errors)")
    summary.add_row("B", f"{run_b.path} ({len(run_b.decisions)} decisions, {run_b.errors} errors)")
    summary.add_row(
        "paired records", f"{result.paired} (only A: {result.only_a}, only B: {result.only_b})"
    )
    summary.add_row("agreement (95% Wilson)", evidence.intervals.agreement.percent())
    summary.add_row("Cohen's kappa (95% bootstrap)", _kappa(result, evidence))
    summary.add_row("changed decisions", str(len(result.changed)))
    test = result.mcnemar_decisions
    summary.add_row(
        f"McNemar, positive ({'/'.join(result.positive)}) decisions",
        f"A only {test.b}, B only {test.c}: exact p = {test.p_exact:.4g}",
    )
    console.print(summary)
    print_labels(result, console)
    print_run_rates(evidence, console)
    print_evidence(evidence, result, console)

    if result.gold_a and result.gold_b and result.mcnemar_correct:
        for name, conf in (("A", result.gold_a), ("B", result.gold_b)):
            verdict = no_better_text(conf)
            if verdict:
                console.print(
                    f"Run {name}: accuracy {_pct(conf.accuracy)} ({baseline_text(conf)}): "
                    f"{verdict}.",
                    soft_wrap=True,
                )
        test = result.mcnemar_correct
        console.print(
            f"McNemar on correctness: only A right {test.b}, only B right {test.c}; exact "
            f"p = {test.p_exact:.4g}, chi2 = {test.chi2:.3f} (p = {test.p_chi2:.4g})"
        )
    print_methods(evidence, console)

    print_serving(*setups, console)

    if result.changed and show > 0:
        changed = Table(title=f"Changed decisions (first {min(show, len(result.changed))})")
        for column in ("id", "A", "B", "gold"):
            changed.add_column(column)
        for item in result.changed[:show]:
            changed.add_row(item.id, item.a, item.b, item.gold or "")
        console.print(changed)
