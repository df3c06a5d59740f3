"""The report names the block size when a step's shared prefix is shorter than one block: the
demo's 0.0% hit rate read "You lose 100.0 points of hit rate to prompt design" and not why."""

from __future__ import annotations

import json

from sparkops.jobdir.job_report import PrefixRecord
from sparkops.report.render import write_report
from sparkops.report.steps import short_prefix_note
from tests.unit.test_report import make_job, sample

SENTENCE = (
    "Shared prefixes shorter than one 128-token block (screen 78, confirm 40 tokens): vLLM "
    "caches whole blocks only, so these steps reuse nothing; put at least 128 tokens of "
    "shared instructions before the record."
)


def prefix(shared: dict[str, int], block: int = 128) -> dict:
    return {
        "block_size": block,
        "steps": {
            name: dict(shared_tokens=n, reusable_tokens=n // block * block,
                       tail_tokens=n % block)
            for name, n in shared.items()
        },
    }  # fmt: skip


def test_only_prefixes_shorter_than_a_block_are_named() -> None:
    probed = PrefixRecord.from_json(prefix({"screen": 78, "detail": 300, "confirm": 40}))
    assert short_prefix_note(probed) == SENTENCE
    assert short_prefix_note(PrefixRecord.from_json(prefix({"screen": 1300}))) is None
    assert short_prefix_note(PrefixRecord()) is None  # no probe at the start of the job


def test_the_report_says_why_a_short_prefix_hits_nothing(tmp_path) -> None:
    samples = [sample(1000, "a", 0, 0), sample(1040, "a", 10_000, 0)]
    job = make_job(tmp_path, [(1000.0, 4, [1000.0 + i for i in range(40)])], samples=samples)
    (job / "prefix.json").write_text(json.dumps(prefix({"screen": 78, "confirm": 40})))
    with (job / "results.jsonl").open("a") as fh:
        for step, tokens in (("screen", 120), ("confirm", 90)):
            call = {"step": step, "prompt_tokens": tokens, "cached_tokens": 0}
            row = {"id": step, "status": "done", "final": "no", "t": 1040.0, "run": 1}
            fh.write(json.dumps({**row, "steps": [call]}) + "\n")
    report = write_report(job)
    assert report.hit_rate_verdict == (
        "You lose 100.0 points of hit rate to prompt design and 0.0 to cache pressure: the "
        f"cache keeps up; to gain, share more text across records. {SENTENCE}"
    )
    assert SENTENCE in (job / "report.md").read_text()
