"""Accuracy comparison of two batch runs over the same records (`sparkops compare`).

The seed saw FP8 weights cost a small, consistent accuracy drop against 4-bit weights on the
same records, and asks users to check on their own data before a large run: this package
measures agreement, changed decisions, accuracy against gold labels (beside the majority-class
baseline it has to beat) and McNemar's test. Gold labels are scored only where they can be:
compare/gold.py refuses labels in other words (unless `--gold-map` maps them) and ids that
match no record.
"""

from sparkops.compare.stats import Comparison, compare_decisions, mcnemar

__all__ = ["Comparison", "compare_decisions", "mcnemar"]
