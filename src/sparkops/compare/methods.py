"""`sparkops compare RUN_A RUN_B --methods [FILE]`: the methods section of a comparison.

Run A's job folder gives the sections (methods/document.py, in TRIPOD-LLM's order); run B's
values are listed where they differ from A's (the change under study: the quantisation, the
prompt, the constraint mode, the serving setup, and anything else that moved); the analysis
section holds the comparison itself: every figure with its 95% interval and the method that
gave it, McNemar's tests, and with --margin the equivalence verdicts.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from sparkops.compare.equivalence import figure_name, points
from sparkops.compare.evidence import Evidence
from sparkops.compare.intervals import BOOTSTRAP, FIGURE_NAMES, WILSON, methods_text
from sparkops.compare.runs import RunDecisions
from sparkops.compare.stats import Comparison
from sparkops.errors import UserError
from sparkops.jobdir.folder import MANIFEST
from sparkops.jobdir.reader import JobFolder
from sparkops.methods.document import (
    Section,
    differing,
    job_sections,
    paragraph,
    render,
    write_methods,
)
from sparkops.methods.facts import Fact, JobFacts

DEFAULT = Path("methods.md")


def add_methods_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--methods",
        nargs="?",
        const=DEFAULT,
        type=Path,
        metavar="FILE",
        help="also write the comparison's methods section (default file: methods.md here): run "
        "A's job folder in TRIPOD-LLM's order, run B's values where they differ, and the "
        "comparison with its intervals, their methods and the verdicts; both runs must be job "
        "folders",
    )


def job_folder(run: RunDecisions) -> Path:
    """The job folder a run's results.jsonl is in; refused when it is no job folder."""
    folder = run.path.parent
    if not JobFolder.of(folder).files.manifest.is_file():
        raise UserError(
            f"--methods reads each run's job folder, but {folder} has no {MANIFEST}; pass the "
            "runs' --out folders (not copies of results.jsonl), or drop --methods"
        )
    return folder


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def comparison_section(
    result: Comparison,
    evidence: Evidence,
    gold: Path | None,
    gold_map: dict[str, str],
) -> Section:
    """The comparison: what was compared, every figure with its interval, the tests, the
    verdicts and which method gave which interval."""
    ivs = evidence.intervals
    said = methods_text(ivs.boot)
    rows = [
        Fact(
            "Records compared",
            f"{result.paired:,} decided in both runs (only A {result.only_a:,}, only B "
            f"{result.only_b:,}); decisions counted positive: {', '.join(result.positive)}",
            "results.jsonl of both runs",
        ),
        Fact("Agreement", ivs.agreement.percent() + " (95% Wilson)", "results.jsonl of both runs"),
        Fact(
            "Cohen's kappa",
            ivs.kappa.plain() + " (95% paired bootstrap)",
            "results.jsonl of both runs",
        ),
        Fact(
            "Positive rate",
            f"A {ivs.runs['a']['positive_rate'].percent()}, B "
            f"{ivs.runs['b']['positive_rate'].percent()}; B - A "
            f"{ivs.differences['positive_rate'].points()}",
            "results.jsonl of both runs",
        ),
        Fact(
            "McNemar, positive decisions",
            f"A only {result.mcnemar_decisions.b}, B only {result.mcnemar_decisions.c}: exact "
            f"p = {result.mcnemar_decisions.p_exact:.4g}",
            "results.jsonl of both runs",
        ),
    ]
    if gold is not None and result.gold_a is not None and result.gold_b is not None:
        rows += gold_rows(result, evidence, gold, gold_map)
    rows += [
        Fact(
            f"Equivalence of {figure_name(v.figure)} within {points(v.margin)} points",
            f"B - A {'n/a' if v.difference is None else f'{100 * v.difference:+.1f} points'}; "
            f"{v.text()}" + (f" (TOST p = {v.p_tost:.3g})" if v.p_tost is not None else ""),
            "results.jsonl of both runs",
        )
        for v in evidence.verdicts
    ]
    rows += [
        Fact("Intervals of proportions", said[WILSON], "sparkops compare"),
        Fact("Intervals of kappa and differences", said[BOOTSTRAP], "sparkops compare"),
    ]
    if evidence.margin is not None:
        rows.append(
            Fact(
                "Equivalence test",
                "paired two one-sided tests, 5% each side (z on the per-record differences; an "
                "exact bound where no record differs); 'different': exact McNemar p < 0.05; "
                "records needed at 80% power",
                "sparkops compare",
            )
        )
    return Section("Analysis and uncertainty", tuple(rows))


def gold_rows(
    result: Comparison, evidence: Evidence, gold: Path, gold_map: dict[str, str]
) -> list[Fact]:
    """The figures against the gold labels, per run and B - A."""
    ivs = evidence.intervals
    source = f"{gold.name} (sha256 {sha256_of(gold)[:16]})"
    mapped = f"; gold labels mapped: {', '.join(f'{k}={v}' for k, v in gold_map.items())}"
    conf = result.gold_a
    assert conf is not None
    rows = [
        Fact(
            "Gold labels",
            f"{result.gold_paired:,} paired records have one" + (mapped if gold_map else ""),
            source,
        )
    ]
    for key in ("accuracy", "sensitivity", "specificity", "ppv", "npv"):
        name = FIGURE_NAMES[key]
        rows.append(
            Fact(
                name[0].upper() + name[1:],
                f"A {ivs.runs['a'][key].percent()}, B {ivs.runs['b'][key].percent()}; B - A "
                f"{ivs.differences[key].points()}",
                f"results.jsonl of both runs, {gold.name}",
            )
        )
    if ivs.baseline is not None:
        rows.append(
            Fact(
                "Majority-class baseline",
                f"{ivs.baseline.percent()} (always '{conf.majority}')",
                gold.name,
            )
        )
    for label, runs in (ivs.recall or {}).items():
        rows.append(
            Fact(
                f"Recall of {label}",
                f"A {runs['a'].percent()}, B {runs['b'].percent()} ({runs['a'].n} records)",
                f"results.jsonl of both runs, {gold.name}",
            )
        )
    if result.mcnemar_correct is not None:
        test = result.mcnemar_correct
        rows.append(
            Fact(
                "McNemar, correctness",
                f"only A right {test.b}, only B right {test.c}: exact p = {test.p_exact:.4g}",
                f"results.jsonl of both runs, {gold.name}",
            )
        )
    return rows


def differences_section(b: JobFacts, sections_a: list[Section]) -> Section:
    """Run B's values where they differ from run A's."""
    rows = [
        Fact(
            f"{title}: {fact.item}",
            f"A: {fact.value} / B: {other.value}",
            other.source,
        )
        for title, fact, other in differing(sections_a, job_sections(b))
    ]
    if not rows:
        rows = [Fact("Everything above", "the same for run B", "both job folders")]
    return Section(f"Run B ({b.directory.name}): what differed from run A", tuple(rows))


def write_comparison_methods(
    path: Path,
    run_a: RunDecisions,
    run_b: RunDecisions,
    result: Comparison,
    evidence: Evidence,
    gold: Path | None,
    gold_map: dict[str, str],
) -> Path:
    """The comparison's methods.md at `path`; its path returned."""
    a, b = JobFacts.read(job_folder(run_a)), JobFacts.read(job_folder(run_b))
    analysis = comparison_section(result, evidence, gold, gold_map)
    sections = job_sections(a, analysis=analysis)
    where = next(i for i, s in enumerate(sections) if s is analysis)
    sections.insert(where, differences_section(b, job_sections(a)))
    prose = (
        paragraph(a, None)
        + f" Run B ({b.directory.name}) was compared with run A ({a.directory.name}) on "
        f"{result.paired:,} records decided in both: agreement "
        f"{evidence.intervals.agreement.percent()}, Cohen's kappa "
        f"{evidence.intervals.kappa.plain()} (95% intervals; Wilson, paired bootstrap)."
        + verdict_sentence(evidence)
    )
    title = f"Methods: run A {a.directory.name} compared with run B {b.directory.name}"
    return write_methods(path, render(title, prose, sections))


def verdict_sentence(evidence: Evidence) -> str:
    """The verdicts in one sentence (empty without --margin)."""
    if evidence.margin is None or not evidence.verdicts:
        return ""
    said = "; ".join(f"{figure_name(v.figure)}: {v.text()}" for v in evidence.verdicts)
    return f" Within a margin of {points(evidence.margin)} points: {said}."
