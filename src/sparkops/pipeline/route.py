"""Routing: which step a record goes to after an answer, or whether it is finished."""

from __future__ import annotations

from sparkops.pipeline.spec import STOP, PipelineSpec


def next_step(spec: PipelineSpec, step_name: str, label: str) -> str | None:
    """Name of the next step after `step_name` answered `label`, or None when finished.

    Without a `next` map a step falls through to the following step (the last one stops).
    """
    names = [s.name for s in spec.steps]
    idx = names.index(step_name)
    step = spec.steps[idx]
    if step.next is None:
        return names[idx + 1] if idx + 1 < len(names) else None
    target = step.next.get(label, STOP)
    return None if target == STOP else target
