"""Answers from another model, kept without --strict-serving (issue 37 item 7): the job warned
once on the terminal, but `batch status` and report.md did not mention them. Both now say "N
answers came from model X, not the pipeline's Y", counted from each step's `model` in
results.jsonl. A real job through a router (the rewriting proxy) that falls back for three
records."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from sparkops.jobdir.durable import append_json
from sparkops.jobdir.folder import Manifest, prepare_dir
from sparkops.jobdir.status import job_status, status_line
from sparkops.report.compute import compute_report, load_dir
from sparkops.report.render import markdown
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import write_records

FALLBACK = {"chatcmpl-r2", "chatcmpl-r5", "chatcmpl-r7"}  # the answers to records r2, r5, r7


def fallback_for_three(body: dict[str, Any]) -> dict[str, Any]:
    """A router that answers three records (and nothing else) from its fallback model."""
    return {**body, "model": "big-fallback"} if body.get("id") in FALLBACK else body


SENTENCE = (
    "3 answers came from model 'big-fallback', not the pipeline's 'tiny' (each step's `model` "
    "in results.jsonl says which)"
)


def test_status_and_report_say_how_many_answers_came_from_another_model(
    job, fault_server, rewriting_proxy
):
    write_records(job["input"], 10)
    proxy = rewriting_proxy(fault_server.url)
    proxy.rewrite = fallback_for_three
    run = sparkops(*batch_run(job, proxy.openai_url), limit=60)
    assert run.returncode == 0, run.stderr
    results = [json.loads(x) for x in (job["out"] / "results.jsonl").read_text().splitlines()]
    models = Counter(s["model"] for r in results for s in r["steps"])
    assert models == {"tiny": 7, "big-fallback": 3}
    # a crash between write and sync: r5's line again, counted once by every reader
    with (job["out"] / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(next(r for r in results if r["id"] == "r5")) + "\n")

    status = sparkops("batch", "status", str(job["out"]), limit=30)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"{job['out']}: complete: 10 done")
    assert SENTENCE in status.stdout
    as_json = json.loads(sparkops("batch", "status", str(job["out"]), "--json").stdout)
    assert as_json["other_model_answers"] == [
        {"model": "big-fallback", "expected": "tiny", "answers": 3}
    ]

    report = sparkops("report", str(job["out"]), limit=60)
    assert report.returncode == 0, report.stderr
    md = (job["out"] / "report.md").read_text()
    assert f"**{SENTENCE}**: their decisions are that model's, not the pipeline's." in md
    data = json.loads((job["out"] / "report.json").read_text())
    assert data["other_model_answers"] == as_json["other_model_answers"]


def test_a_job_whose_answers_all_came_from_its_model_says_nothing(tmp_path):
    """An other-model line with no kept answer of that model, and answers that name none."""
    out = tmp_path / "job"
    prepare_dir(out, Manifest("p", "i", "in.jsonl", "jsonl", "id", 3), restart=False)
    steps = [[{"step": "s", "model": "tiny"}], [{"step": "s"}], []]
    with (out / "results.jsonl").open("w") as fh:
        for i, st in enumerate(steps):
            line = {"id": f"r{i}", "status": "done", "final": "no", "steps": st, "t": 1.0}
            fh.write(json.dumps({**line, "run": 1}) + "\n")
    other = {"event": "other-model", "t": 1.0, "run": 1, "model": "big", "expected": "tiny"}
    append_json(out / "serving.jsonl", other)
    st = job_status(out)
    assert st.other_models == () and st.as_dict()["other_model_answers"] == []
    assert "came from model" not in status_line(out, st)
    report = compute_report(load_dir(out))
    assert report.other_model_answers == ()
    assert "came from model" not in markdown(report, "job")


def test_strict_serving_keeps_no_foreign_answer_so_status_names_none(
    job, fault_server, rewriting_proxy
):
    """The job stopped at the first foreign answer and kept none: a count of 0 is not said."""
    write_records(job["input"], 10)
    proxy = rewriting_proxy(fault_server.url)
    proxy.rewrite = fallback_for_three
    extra = ("--strict-serving",)
    run = sparkops(*batch_run(job, proxy.openai_url, extra=extra), limit=60)
    assert run.returncode == 1 and "--strict-serving" in run.stderr
    serving = (job["out"] / "serving.jsonl").read_text()
    assert '"other-model"' in serving  # the job met the other model...
    status = sparkops("batch", "status", str(job["out"]), limit=30)
    assert "came from model" not in status.stdout  # ...and kept none of its answers
