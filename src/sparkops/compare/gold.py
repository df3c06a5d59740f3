"""Gold labels against two runs' decisions: the explicit `--gold-map`, and the refusals that
keep a figure from being computed over labels or ids that do not match (issue 37 item 8).

Scoring reduces every label to positive (a `--positive` label) or not, so a gold label that is
no label of the step used to count as a negative, whatever it meant: gold TRUE/FALSE against
decisions yes/no made every gold label negative, and accuracy read as the share of "no"
decisions (98.7% for a run whose accuracy was 69.0%). Now every scored gold label must be one
of the step's labels, compared after case folding and trimming only (stats.normalise says why
case may fold); anything else is refused with both vocabularies side by side, unless
`--gold-map GOLD=LABEL` maps it. compare reads no pipeline, so the step's labels it knows are
the decisions of either run and the `--positive` labels; a label the step has but neither run
decided maps to itself (`--gold-map no=no`), with a warning that it counts as negative.

A gold file whose ids match no record is refused too (every figure would read "n/a"). Errors
count ids and labels; they never print an id or record text, and gold labels only while they
look like labels (a few short values: a wrong `--gold-label-field` may name the note column).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from sparkops.compare.runs import RunDecisions
from sparkops.compare.stats import normalise
from sparkops.errors import UserError

# A column with more distinct values, or longer ones, is not shown: it may be record text.
SHOWN_LABELS = 12
SHOWN_LABEL_CHARS = 40


def parse_gold_map(entries: Sequence[str] | None) -> dict[str, str]:
    """`--gold-map TRUE=yes,FALSE=no` (repeatable) as {gold label as typed: the step's label};
    one gold label mapped two ways (case folded) is refused."""
    mapping: dict[str, str] = {}
    for entry in entries or ():
        for item in entry.split(","):
            gold, sep, label = (part.strip() for part in item.partition("="))
            if not sep or not gold or not label:
                raise UserError(
                    f"--gold-map {item.strip()!r} is not GOLD=LABEL: write each gold label and "
                    "the step's label it means, e.g. --gold-map TRUE=yes,FALSE=no"
                )
            earlier = folded(mapping).get(normalise(gold))
            if earlier is not None and normalise(earlier) != normalise(label):
                raise UserError(
                    f"--gold-map maps {gold!r} twice ({earlier!r} and {label!r}): keep one"
                )
            mapping[gold] = label
    return mapping


def folded(mapping: Mapping[str, str]) -> dict[str, str]:
    """The map keyed by folded gold label, as gold labels are matched."""
    return {normalise(gold): label for gold, label in mapping.items()}


def step_labels(run_a: RunDecisions, run_b: RunDecisions) -> Counter[str]:
    """Every decision of either run (all its decided records), folded, with its count."""
    return Counter(normalise(v) for run in (run_a, run_b) for v in run.decisions.values())


def apply_gold_map(
    gold: Mapping[str, str],
    mapping: Mapping[str, str],
    decided: Counter[str],
    positive: Iterable[str],
) -> tuple[dict[str, str], list[str]]:
    """The gold labels with `mapping` applied, and a warning per target that no run decided
    and no `--positive` names (a label of the step that neither run gave: it counts as
    negative, which a typo for a real label would too, so it is said)."""
    seen = {normalise(label) for label in gold.values()}
    unknown = [typed for typed in mapping if normalise(typed) not in seen]
    if unknown:
        raise UserError(
            f"--gold-map names {_quoted(unknown)}, which the gold file does not hold (gold "
            f"labels: {_listing(Counter(gold.values()))}): map the gold file's own labels"
        )
    known = set(decided) | {normalise(p) for p in positive}
    warnings = [
        f"--gold-map maps {typed!r} to {label!r}, which neither run decided and no "
        "--positive names: those gold labels count as negative"
        for typed, label in mapping.items()
        if normalise(label) not in known
    ]
    by_folded = folded(mapping)
    mapped = {rid: by_folded.get(normalise(label), label) for rid, label in gold.items()}
    return mapped, warnings


def label_problem(
    scored: Mapping[str, str],
    decided: Counter[str],
    positive: Iterable[str],
    mapping: Mapping[str, str],
) -> str | None:
    """Why the scored records' gold labels cannot be scored against the step's labels (None
    when each is a step label or is mapped): the two vocabularies side by side and the fix."""
    pos = sorted({normalise(p) for p in positive})
    known = set(decided) | set(pos)
    golds = Counter(scored.values())
    accepted = known | set(folded(mapping))
    foreign = sorted({label for label in golds if normalise(label) not in accepted}, key=normalise)
    if not foreign:
        return None
    steps = {**{p: 0 for p in pos}, **decided}  # an undecided --positive label: 0
    step_side = ", ".join(
        f"{label} {n}" + (" (--positive)" if label in pos and not n else "")
        for label, n in sorted(steps.items(), key=lambda item: (-item[1], item[0]))
    )
    shown = _showable(golds)
    which = ", ".join(foreign) if shown else str(len(foreign))
    example = ",".join(f"{label}=LABEL" for label in foreign) if shown else "GOLD=LABEL"
    return (
        f"gold label(s) {which} are not the step's labels, so each would count as negative "
        f"whatever it means: gold labels seen: {_listing(golds)} vs the step's labels "
        f"(decisions of either run, and --positive): {step_side}; map each one explicitly, "
        f"e.g. --gold-map {example} (LABEL one of: {', '.join(sorted(known))}; a label the "
        "step has but neither run decided maps to itself), or write the gold file in the "
        "step's labels"
    )


def id_problem(
    gold: Mapping[str, str],
    gold_path: Path,
    id_field: str,
    run_a: RunDecisions,
    run_b: RunDecisions,
) -> str | None:
    """Why no paired record can be scored against `gold` (None when at least one can): the
    counts of ids on each side, never an id."""
    a, b = run_a.decisions.keys(), run_b.decisions.keys()
    if gold.keys() & a & b:
        return None
    counts = f"{gold_path} holds {len(gold)} ids, run A {len(a)} decided records, run B {len(b)}"
    either = len(gold.keys() & (a | b))
    if either:
        return (
            f"no record decided in both runs has a gold label: {counts}; {either} gold id(s) "
            "match a record of one run only, so there is nothing to score side by side; "
            "compare runs over the input the gold labels are for"
        )
    near = len({_loose(k) for k in gold} & {_loose(k) for k in a | b})
    hint = (
        f" ({near} would match if case and leading zeros were ignored: the files spell the "
        "ids differently; make them the same)"
        if near
        else ""
    )
    return (
        f"no gold id is a record id of either run: {counts}, and 0 ids in common{hint}; "
        f"check that --gold-id-field (now {id_field!r}) names the column of the records' ids "
        "and that the gold labels are for this input (ids match exactly, as text)"
    )


def _loose(rid: str) -> str:
    """An id with case and leading zeros dropped: only to hint at a spelling difference."""
    return rid.strip().casefold().lstrip("0") or "0"


def _showable(labels: Counter[str]) -> bool:
    """Whether the values look like labels (a few short ones), not a column of record text."""
    return len(labels) <= SHOWN_LABELS and all(len(x) <= SHOWN_LABEL_CHARS for x in labels)


def _listing(labels: Counter[str]) -> str:
    """Labels with their counts, commonest first; only a count where they may be text."""
    if not _showable(labels):
        return (
            f"{len(labels)} distinct values, not shown (labels are a few short words: is "
            "--gold-label-field the label column?)"
        )
    return ", ".join(f"{x} {n}" for x, n in sorted(labels.items(), key=lambda i: (-i[1], i[0])))


def _quoted(labels: Iterable[str]) -> str:
    return ", ".join(repr(x) for x in labels)
