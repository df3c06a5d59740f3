"""Answers cut off at max_tokens (issue 34 item 11): counted per step, said once per step
when they pass a share, never for a step whose answers are whole; old lines count none."""

from __future__ import annotations

from sparkops.batch.truncation import WARN_AFTER, Truncation
from sparkops.jobdir import lines


def step(name: str, reason: str | None) -> dict:
    return {"step": name, "answer": "unclear", "finish_reason": reason}


def test_a_step_cut_off_is_said_once_with_the_fix_and_a_whole_step_never():
    said: list[str] = []
    cut = Truncation(on_warning=said.append)
    for _ in range(WARN_AFTER * 3):
        cut.count([step("screen", "length"), step("label", "stop")])
    assert len(said) == 1
    assert said[0].startswith(f"step 'screen': {WARN_AFTER} of {WARN_AFTER} answers so far")
    assert "raise the step's max_tokens" in said[0]
    assert cut.cut == {"screen": WARN_AFTER * 3}
    assert cut.answers == {"screen": WARN_AFTER * 3, "label": WARN_AFTER * 3}


def test_a_rare_cut_answer_is_no_warning():
    said: list[str] = []
    cut = Truncation(on_warning=said.append)
    for i in range(200):
        cut.count([step("screen", "length" if i % 20 == 0 else "stop")])
    assert said == [] and cut.cut["screen"] == 10


def test_lines_without_finish_reason_count_no_cut_answer():
    old = {"id": "r1", "status": "done", "final": "no", "steps": [{"step": "screen"}]}
    new = {**old, "steps": [step("screen", "length"), step("b", "length")]}
    assert lines.outcome(old).cut == 0 and lines.outcome(new).cut == 2
    assert lines.StepUsage.from_json({"step": "screen"}).cut is False
    assert lines.StepUsage.from_json(step("screen", "length")).cut is True
    assert lines.outcome({**old, "steps": "garbled"}).cut == 0
