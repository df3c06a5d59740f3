"""Pure statistics for paired decisions: agreement, Cohen's kappa, confusion against gold
labels, and McNemar's test (exact binomial, plus the continuity-corrected chi-square).

Decisions are strings (a pipeline's `final`); a decision is positive when it is one of the
`positive` labels, anything else (including "unclear") counts as negative. Only records
present in both runs are paired; gold metrics use records present in both runs and the gold.
`label_counts` says how each label was counted (every label its own row, "unclear" included),
and `positive_problem` whether the positive labels can be right at all. Each `Confusion` also
carries its majority-class baseline (what one constant answer scores over the same records):
`baseline_text` and `no_better_text` are the words `compare` and the demo print beside an
accuracy.

Why not scipy/statsmodels/scikit-learn: each formula is a few lines on integer counts
(math.comb is exact for any n), and the libraries would add 113 MB installed (scipy) to
over 260 MB (statsmodels with scipy and pandas) to every install of the kit, Sparks
included, for no numerical gain: checked over b, c < 60, the exact p-value matches
scipy.stats.binomtest and statsmodels' exact mcnemar, the corrected chi-square and its p
match statsmodels, and kappa matches scikit-learn, all within 5e-15. Two results differ on
purpose: statsmodels' corrected chi-square is (|b - c| - 1)^2 / (b + c) also when b == c,
a discrepancy where there is none (0.5 for b = c = 1), which we clamp to 0; scikit-learn's
kappa is NaN with warnings where both runs used one class, which we report as None.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class McNemar:
    """McNemar's test on discordant pairs: `b` = only A has the property, `c` = only B."""

    b: int
    c: int
    p_exact: float  # two-sided exact binomial (use this for small b + c)
    chi2: float  # with continuity correction; 0 when b + c == 0
    p_chi2: float


@dataclass(frozen=True)
class Confusion:
    """One run's decisions against gold labels, and the majority-class baseline over the same
    records: what answering `majority` (the commonest gold label of the larger gold class) to
    every record scores. An accuracy means little without it: a model answering "no" to 296 of
    300 notes scored 69.0%, exactly what "no" to every note scores (207 of 300 gold labels)."""

    n: int
    tp: int
    fp: int
    tn: int
    fn: int
    majority: str = ""

    @property
    def correct(self) -> int:
        return self.tp + self.tn

    @property
    def baseline_correct(self) -> int:
        """Records a constant answer of the larger gold class gets right (the same scoring as
        the run's: positive against not positive)."""
        return max(self.tp + self.fn, self.tn + self.fp)

    @property
    def baseline(self) -> float | None:
        return self.baseline_correct / self.n if self.n else None

    @property
    def beats_baseline(self) -> bool:
        """Counted in whole records, so a tie is a tie (never a float's rounding)."""
        return self.correct > self.baseline_correct

    @property
    def accuracy(self) -> float | None:
        return (self.tp + self.tn) / self.n if self.n else None

    @property
    def sensitivity(self) -> float | None:
        positives = self.tp + self.fn
        return self.tp / positives if positives else None

    @property
    def specificity(self) -> float | None:
        negatives = self.tn + self.fp
        return self.tn / negatives if negatives else None

    @property
    def ppv(self) -> float | None:
        """Positive predictive value: of the records the run called positive, the share that
        are (the figure a screening's reader acts on)."""
        said = self.tp + self.fp
        return self.tp / said if said else None

    @property
    def npv(self) -> float | None:
        """Negative predictive value: of the records the run called negative, the share that
        are."""
        said = self.tn + self.fn
        return self.tn / said if said else None

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "accuracy": self.accuracy,
            "sensitivity": self.sensitivity,
            "specificity": self.specificity,
            "ppv": self.ppv,
            "npv": self.npv,
            "baseline": {
                "accuracy": self.baseline,
                "answer": self.majority,
                "correct": self.baseline_correct,
            },
            "better_than_baseline": self.beats_baseline,
        }


@dataclass(frozen=True)
class Changed:
    """A record whose decision differs between the runs."""

    id: str
    a: str
    b: str
    gold: str | None = None


@dataclass(frozen=True)
class LabelCount:
    """One label's records in run A, run B and the gold labels, and how it was counted."""

    label: str
    a: int
    b: int
    gold: int
    positive: bool

    @property
    def counted_as(self) -> str:
        return "positive" if self.positive else "negative"


def label_counts(
    run_a: Mapping[str, str],
    run_b: Mapping[str, str],
    gold: Mapping[str, str] | None,
    positive: Iterable[str],
) -> tuple[LabelCount, ...]:
    """Every label of either run or the gold (normalised), positives first, then by count: so
    a label that is neither `yes` nor `no` ("unclear", "later") shows as its own row."""
    pos = frozenset(normalise(p) for p in positive)
    a = Counter(normalise(v) for v in run_a.values())
    b = Counter(normalise(v) for v in run_b.values())
    g = Counter(normalise(v) for v in (gold or {}).values())
    labels = set(a) | set(b) | set(g)
    rows = [LabelCount(x, a[x], b[x], g[x], x in pos) for x in labels]
    return tuple(sorted(rows, key=lambda r: (not r.positive, -(r.a + r.b + r.gold), r.label)))


def positive_problem(
    counts: Iterable[LabelCount], positive: Iterable[str], gold: bool
) -> tuple[str, bool] | None:
    """Why the `positive` labels look wrong, and whether to refuse: (sentence, refuse).

    None when some decision of either run is positive. Refused (exit 2) when, against gold
    labels, no decision is positive and the runs' decisions share no label with the gold
    (a pipeline answering now/later scored against yes/no: every record would count as a
    negative and sensitivity read 0%). Otherwise a warning: the runs may simply have
    decided nothing positive."""
    rows = list(counts)
    if any(r.positive and (r.a or r.b) for r in rows):
        return None
    wanted = ", ".join(sorted(normalise(p) for p in positive))
    seen = ", ".join(f"{r.label} {r.a + r.b}" for r in rows if r.a or r.b)
    head = f"--positive {wanted} matches no decision in either run (decisions: {seen})"
    decided = {r.label for r in rows if r.a or r.b}
    in_gold = {r.label for r in rows if r.gold}
    if gold and not decided & in_gold:
        return (
            f"{head}, and no decision is a gold label ({', '.join(sorted(in_gold))}): "
            "every record would count as negative; pass --positive with the decision that "
            "means positive (repeatable), or gold labels in the pipeline's own labels",
            True,
        )
    return f"{head}: every record counts as negative", False


@dataclass(frozen=True)
class Comparison:
    """Everything `sparkops compare` reports."""

    paired: int
    only_a: int
    only_b: int
    agreement: float | None
    kappa: float | None
    changed: tuple[Changed, ...]
    mcnemar_decisions: McNemar  # b: A positive & B negative; c: A negative & B positive
    gold_paired: int = 0
    gold_a: Confusion | None = None
    gold_b: Confusion | None = None
    mcnemar_correct: McNemar | None = None  # b: only A correct; c: only B correct
    positive: tuple[str, ...] = field(default_factory=tuple)
    labels: tuple[LabelCount, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "paired": self.paired,
            "only_a": self.only_a,
            "only_b": self.only_b,
            "agreement": self.agreement,
            "kappa": self.kappa,
            "changed_count": len(self.changed),
            "changed": [asdict(item) for item in self.changed],
            "mcnemar_decisions": asdict(self.mcnemar_decisions),
            "gold_paired": self.gold_paired,
            "gold_a": self.gold_a.as_dict() if self.gold_a else None,
            "gold_b": self.gold_b.as_dict() if self.gold_b else None,
            "mcnemar_correct": asdict(self.mcnemar_correct) if self.mcnemar_correct else None,
            "positive": list(self.positive),
            "labels": [{**asdict(r), "counted_as": r.counted_as} for r in self.labels],
        }


def mcnemar(b: int, c: int) -> McNemar:
    """McNemar's test for `b` and `c` discordant pairs.

    Exact: two-sided binomial test of min(b, c) under Binomial(b + c, 1/2). Chi-square:
    (|b - c| - 1)^2 / (b + c) with one degree of freedom, p = erfc(sqrt(chi2 / 2)).
    """
    n = b + c
    if n == 0:
        return McNemar(b=b, c=c, p_exact=1.0, chi2=0.0, p_chi2=1.0)
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    chi2 = (abs(b - c) - 1) ** 2 / n if abs(b - c) > 1 else 0.0
    return McNemar(
        b=b,
        c=c,
        p_exact=min(1.0, 2.0 * tail),
        chi2=chi2,
        p_chi2=math.erfc(math.sqrt(chi2 / 2.0)),
    )


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Agreement beyond chance between two raters over the same items (None if undefined).

    When both runs gave one and the same class to every record, chance agreement is 1 and
    kappa is 0/0: undefined, not perfect agreement (nothing shows the runs can tell classes
    apart). Reporting 1.000 there would read as a validation it is not.
    """
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(1 for a, b in pairs if a == b) / n
    count_a = Counter(a for a, _ in pairs)
    count_b = Counter(b for _, b in pairs)
    expected = sum(count_a[label] * count_b[label] for label in count_a) / (n * n)
    if expected == 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def confusion(decisions: Iterable[tuple[str, str]], positive: frozenset[str]) -> Confusion:
    """Confusion counts for (decision, gold) pairs, both reduced to positive/negative, and the
    gold label a majority-class baseline would answer."""
    tp = fp = tn = fn = 0
    golds: Counter[str] = Counter()
    for decision, gold in decisions:
        golds[gold] += 1
        predicted, actual = decision in positive, gold in positive
        if predicted and actual:
            tp += 1
        elif predicted:
            fp += 1
        elif actual:
            fn += 1
        else:
            tn += 1
    return Confusion(
        n=tp + fp + tn + fn, tp=tp, fp=fp, tn=tn, fn=fn, majority=majority(golds, positive)
    )


def majority(golds: Mapping[str, int], positive: frozenset[str]) -> str:
    """The constant answer that scores the baseline: the commonest gold label of the larger
    class (positive or not; a tie goes to the negative class, the cautious answer), ties
    between labels broken alphabetically so the sentence is the same on every run."""
    pos = sum(n for label, n in golds.items() if label in positive)
    neg = sum(golds.values()) - pos
    in_class = [(label, n) for label, n in golds.items() if (label in positive) == (pos > neg)]
    if not in_class:
        return ""
    return min(in_class, key=lambda item: (-item[1], item[0]))[0]


def baseline_text(conf: Confusion) -> str:
    """The baseline beside an accuracy: "majority-class baseline 69.0%: always 'no'"."""
    if conf.baseline is None:
        return "majority-class baseline n/a: no record has a gold label"
    return f"majority-class baseline {conf.baseline:.1%}: always '{conf.majority}'"


def no_better_text(conf: Confusion, noun: str = "record") -> str | None:
    """The plain sentence for a run no better than its baseline (None when it is better)."""
    if conf.beats_baseline or not conf.n:
        return None
    return f"no better than answering '{conf.majority}' to every {noun}"


def normalise(label: str) -> str:
    """Decisions and gold labels compare after Unicode case folding and trimming, nothing
    more (no boolean, prefix or synonym rule: compare/gold.py refuses a gold label that is no
    step label). Case is safe to fold: a pipeline refuses choices that differ only by case and
    its parser ignores case, so case never tells two of a step's labels apart; casefold, not
    lower, so STRASSE is straße, as the kit's own allowed forms write it."""
    return label.strip().casefold()


def against_gold(
    decisions: Mapping[str, str], gold: Mapping[str, str], positive: Iterable[str] = ("yes",)
) -> Confusion:
    """One run's decisions against gold labels, over the records that have both."""
    pos = frozenset(normalise(p) for p in positive)
    graded = sorted(decisions.keys() & gold.keys())
    return confusion(((normalise(decisions[k]), normalise(gold[k])) for k in graded), pos)


def _graded(gold: Mapping[str, str], common: list[str]) -> dict[str, str] | None:
    """The gold labels of the paired records (None without gold)."""
    return {k: gold[k] for k in common if k in gold} if gold else None


def compare_decisions(
    run_a: Mapping[str, str],
    run_b: Mapping[str, str],
    *,
    gold: Mapping[str, str] | None = None,
    positive: Iterable[str] = ("yes",),
) -> Comparison:
    """Compare two runs' decisions by record id, and each against gold labels if given."""
    pos = frozenset(normalise(p) for p in positive)
    a = {key: normalise(value) for key, value in run_a.items()}
    b = {key: normalise(value) for key, value in run_b.items()}
    common = sorted(a.keys() & b.keys())
    pairs = [(a[key], b[key]) for key in common]
    gold_n = {key: normalise(value) for key, value in (gold or {}).items()}

    changed = tuple(
        Changed(id=key, a=a[key], b=b[key], gold=gold_n.get(key))
        for key in common
        if a[key] != b[key]
    )
    a_only_pos = sum(1 for x, y in pairs if x in pos and y not in pos)
    b_only_pos = sum(1 for x, y in pairs if x not in pos and y in pos)

    result = Comparison(
        paired=len(common),
        only_a=len(a.keys() - b.keys()),
        only_b=len(b.keys() - a.keys()),
        agreement=(len(common) - len(changed)) / len(common) if common else None,
        kappa=cohen_kappa(pairs),
        changed=changed,
        mcnemar_decisions=mcnemar(a_only_pos, b_only_pos),
        positive=tuple(sorted(pos)),
        labels=label_counts(
            {k: a[k] for k in common}, {k: b[k] for k in common}, _graded(gold_n, common), pos
        ),
    )
    if gold is None:
        return result

    graded = [key for key in common if key in gold_n]
    right_a = {key: (a[key] in pos) == (gold_n[key] in pos) for key in graded}
    right_b = {key: (b[key] in pos) == (gold_n[key] in pos) for key in graded}
    return replace(
        result,
        gold_paired=len(graded),
        gold_a=confusion(((a[key], gold_n[key]) for key in graded), pos),
        gold_b=confusion(((b[key], gold_n[key]) for key in graded), pos),
        mcnemar_correct=mcnemar(
            sum(1 for key in graded if right_a[key] and not right_b[key]),
            sum(1 for key in graded if right_b[key] and not right_a[key]),
        ),
    )
