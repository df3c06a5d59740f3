"""The job's own Prometheus metrics (issue 41 item 1): metrics/job_metrics.py (a snapshot in,
the text format out), jobdir/figures.py (the snapshot from a job folder, read as it grows),
batch/exporter.py's live overlay and `sparkops batch metrics DIR [--textfile PATH]`.

The folders are written by the kit's own writers (JobRun, ResultLine, RunEvent, the serving
lines), and the text is read back with prometheus_client's parser, as Prometheus reads it.
"""

from __future__ import annotations

import json
import stat

from prometheus_client.parser import text_string_to_metric_families

from sparkops.batch.exporter import LiveFigures, with_live
from sparkops.jobdir import lines
from sparkops.jobdir.figures import FolderFigures
from sparkops.jobdir.folder import SERVING
from sparkops.jobdir.run import JobRun
from sparkops.jobdir.serving_lines import ServingChange, ServingStart
from sparkops.jobdir.status import job_status
from sparkops.metrics.job_metrics import JobSnapshot, ServingFigures, StepFigures, exposition
from tests.plugins.cli import sparkops
from tests.plugins.job_dir import manifest

SECRET_ID = "patient-0042"
SECRET_TEXT = "headache since Tuesday"
EP = "http://127.0.0.1:8000"
IDENTITY = {"version": "0.11.0", "model": "tiny", "max_model_len": "4096", "root": "/m"}


def samples(text: bytes | str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a text-format page: (name, labels) -> value."""
    page = text.decode() if isinstance(text, bytes) else text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def value(page: dict, name: str, **labels: str) -> float:
    return page[(name, frozenset({"job_folder": "job", **labels}.items()))]


def names(page: dict) -> set[str]:
    return {name for name, _ in page}


def step(name: str, prompt: int, cached: int | None, **extra: object) -> dict:
    entry: dict = {"step": name, "answer": "yes", "prompt_tokens": prompt, "completion_tokens": 1}
    entry["cached_tokens"] = cached
    entry["finish_reason"] = "stop"
    return {**entry, **extra}


def done(rid: str, t: float, *steps: dict) -> dict:
    return lines.ResultLine(rid, "done", 1, 1, t, final="yes", steps=list(steps)).to_json()


def failed(rid: str, t: float, kind: str, code: int = 0) -> dict:
    failure = {"kind": kind, "cause": f"HTTP {code}: {SECRET_TEXT}", "code": code}
    return lines.ResultLine(
        rid, "error", 2, 1, t, error=f"HTTP {code}: {SECRET_TEXT}", error_kind="record",
        failure=failure,
    ).to_json()  # fmt: skip


def make_job(tmp_path, prefix: dict | None = None):
    """A job folder of 5 records after one run: 3 done (one answer unclear, one cut off),
    one error (HTTP 400), a repeated line, a stall, 2 unheld answers, a serving change."""
    job = tmp_path / "job"
    probe = {"steps": {"screen": {"shared_tokens": 60, "reusable_tokens": 48, "tail_tokens": 12}}}
    with JobRun.open(
        job, manifest(total=5), key_field="id", prefix=probe if prefix is None else prefix
    ) as run:
        run.log(lines.RunEvent("start", 1, 100.0, {"concurrency": 4}))
        run.journal.append(done(SECRET_ID, 101.0, step("screen", 100, 40)))
        run.journal.append(done("r2", 102.0, step("screen", 100, 50, parsed=False)))
        run.journal.append(done("r3", 103.0, step("screen", 100, 60, finish_reason="length")))
        run.journal.append(failed("r4", 104.0, "http_status", 400))
        run.journal.append(done("r2", 105.0, step("screen", 100, 50)))  # a record's second line
        run.log(lines.RunEvent("stalled", 1, 103.5, {"endpoint": EP, "quiet_s": 130.0}))
        run.log(lines.RunEvent("rejoined", 1, 103.8, {"endpoint": EP, "out_s": 20.0}))
        run.log(lines.RunEvent("end", 1, 106.0, {"unheld": {EP: 2}}))
    start = ServingStart(100.0, 1, 0, 0, {"kit_version": "x"}, {EP: IDENTITY})
    changed = {**IDENTITY, "version": "0.12.0"}
    change = ServingChange(103.0, 1, 1, 3, EP, changed, [])
    with (job / SERVING).open("w") as fh:
        for line in (start, change):
            fh.write(json.dumps(line.to_json()) + "\n")
    return job


# ---- the text format from a snapshot ---------------------------------------------------------
def test_names_follow_the_naming_guide_counters_end_in_total_and_units_are_named():
    snap = JobSnapshot(
        "job", running=True, runs=2, input_records=10, done=3, failed={("http_status", "400"): 1},
        last_record_time=1.7e9, steps={"screen": StepFigures(5, 1, 1, 1000, 900, 950, 2)},
        stalled={EP: True}, stalls={EP: 1}, unheld={EP: 2}, pace=0.5, eta_s=12.0,
        serving=ServingFigures({EP: IDENTITY}, 1, 1),
    )  # fmt: skip
    text = exposition(snap).decode()
    page = samples(text)
    counters = {f.name for f in text_string_to_metric_families(text) if f.type == "counter"}
    assert counters == {
        "sparkops_job_runs", "sparkops_job_records_done", "sparkops_job_records_failed",
        "sparkops_job_step_answers", "sparkops_job_step_unclear_answers",
        "sparkops_job_step_truncated_answers", "sparkops_job_step_prompt_tokens",
        "sparkops_job_step_cached_prompt_tokens", "sparkops_job_step_reusable_prompt_tokens",
        "sparkops_job_endpoint_stalls", "sparkops_job_unheld_answers",
        "sparkops_job_serving_changes",
    }  # fmt: skip
    assert all(name.endswith("_total") for name in names(page) if name[:-6] in counters)
    assert "# TYPE sparkops_job_records_done_total counter" in text
    assert value(page, "sparkops_job_records_failed_total", kind="http_status", code="400") == 1
    assert value(page, "sparkops_job_records_remaining") == 6
    assert value(page, "sparkops_job_eta_seconds") == 12.0
    assert value(page, "sparkops_job_step_prefix_cache_hit_ratio", step="screen") == 0.9
    assert value(page, "sparkops_job_step_prefix_cache_hit_ceiling_ratio", step="screen") == 0.95
    assert value(page, "sparkops_job_step_calls_in_flight", step="screen") == 2
    assert value(page, "sparkops_job_endpoint_stalled", endpoint=EP) == 1
    info = {"endpoint": EP, "model": "tiny", "version": "0.11.0", "max_model_len": "4096"}
    assert value(page, "sparkops_job_serving_info", **info) == 1
    # every series names its job folder (node exporter refuses a series two files both write)
    assert all(dict(labels).get("job_folder") == "job" for _, labels in page)


def test_unknown_figures_are_left_out_never_written_as_zero():
    snap = JobSnapshot("job", steps={"screen": StepFigures(answers=4, prompt_tokens=400)})
    page = samples(exposition(snap))
    assert value(page, "sparkops_job_step_answers_total", step="screen") == 4
    assert value(page, "sparkops_job_running") == 0
    for absent in (
        "sparkops_job_step_cached_prompt_tokens_total",  # the server did not say
        "sparkops_job_step_prefix_cache_hit_ratio",
        "sparkops_job_step_prefix_cache_hit_ceiling_ratio",  # not probed
        "sparkops_job_step_calls_in_flight",  # not running
        "sparkops_job_eta_seconds",
        "sparkops_job_records_done_per_second",
        "sparkops_job_last_record_timestamp_seconds",
        "sparkops_job_serving_info",
    ):
        assert absent not in names(page), absent


# ---- the snapshot from a job folder ----------------------------------------------------------
def test_the_folder_says_the_figures_batch_status_says(tmp_path):
    job = make_job(tmp_path)
    snap = FolderFigures(job).refresh().snapshot()
    status = job_status(job)
    assert (snap.done, snap.errors, snap.remaining) == (status.done, status.errors, 1)
    assert snap.runs == status.runs == 1 and snap.unheld == status.unheld == {EP: 2}
    assert sum(s.truncated for s in snap.steps.values()) == status.truncated == 1
    assert snap.failed == {("http_status", "400"): 1}
    screen = snap.steps["screen"]
    # counted once per record: r2's second line adds nothing
    assert (screen.answers, screen.unclear, screen.truncated) == (3, 1, 1)
    assert (screen.prompt_tokens, screen.cached_tokens, screen.reusable_tokens) == (300, 150, 144)
    assert screen.hit_ratio == 0.5 and screen.ceiling_ratio == 0.48
    assert snap.last_record_time == 104.0
    assert snap.stalls == {EP: 1} and snap.stalled == {}  # not running: no stall state
    assert snap.serving.epoch == 1 and snap.serving.identities[EP]["version"] == "0.12.0"
    assert snap.running is False and snap.eta_s is None


def test_no_record_id_or_text_reaches_the_metrics(tmp_path):
    text = exposition(FolderFigures(make_job(tmp_path)).refresh().snapshot()).decode()
    assert SECRET_ID not in text and SECRET_TEXT not in text and "Tuesday" not in text
    # the failure's kind and status, not the server's message (which can quote a record)
    assert 'kind="http_status"' in text and 'code="400"' in text


def test_a_step_without_cached_tokens_or_probe_has_no_ratio(tmp_path):
    job = tmp_path / "job"
    with JobRun.open(job, manifest(), key_field="id") as run:
        run.journal.append(done("r1", 1.0, step("screen", 100, None)))
        run.journal.append(done("r2", 2.0, step("screen", 100, 30)))
    screen = FolderFigures(job).refresh().snapshot().steps["screen"]
    assert screen.cached_tokens is None and screen.hit_ratio is None  # one call did not say
    assert screen.reusable_tokens is None and screen.ceiling_ratio is None  # no prefix.json


def test_usage_that_cannot_be_true_stays_out_of_the_token_sums(tmp_path):
    job = tmp_path / "job"
    with JobRun.open(job, manifest(), key_field="id") as run:
        run.journal.append(done("r1", 1.0, step("screen", 100, 50)))
        run.journal.append(done("r2", 2.0, step("screen", 100, 6243)))  # cached > prompt
    screen = FolderFigures(job).refresh().snapshot().steps["screen"]
    assert screen.answers == 2 and screen.prompt_tokens == 100 and screen.hit_ratio == 0.5


def test_refresh_reads_only_what_was_appended_and_waits_for_a_whole_line(tmp_path):
    job = make_job(tmp_path)
    figures = FolderFigures(job).refresh()
    assert figures.done == 3
    results = job / "results.jsonl"
    line = json.dumps(done("r5", 110.0, step("screen", 100, 100))).encode() + b"\n"
    with results.open("ab") as fh:
        fh.write(line[:20])  # a line still being written
    assert figures.refresh().done == 3
    with results.open("ab") as fh:
        fh.write(line[20:] + b"not json\n")
    snap = figures.refresh().snapshot()
    assert snap.done == 4 and snap.remaining == 0 and snap.last_record_time == 110.0
    assert snap.steps["screen"].answers == 4
    assert figures.refresh().snapshot().done == 4  # nothing new: nothing counted twice


def test_errors_whose_kind_no_line_names_count_as_unknown(tmp_path):
    job = tmp_path / "job"
    old = {"id": "r1", "status": "error", "error": "HTTP 400", "line": 1, "run": 1, "t": 1.0}
    with JobRun.open(job, manifest(), key_field="id") as run:
        run.journal.append(old)  # an older client's line: no failure object
    assert FolderFigures(job).refresh().snapshot().failed == {("unknown", ""): 1}


def test_the_running_client_lays_its_figures_over_the_folders(tmp_path):
    base = FolderFigures(make_job(tmp_path)).refresh().snapshot()
    live = LiveFigures(
        in_flight={"screen": 3, "label": 1}, stalled={EP: False}, unheld={EP: 5}, pace=2.0,
        eta_s=30.0,
    )  # fmt: skip
    snap = with_live(base, live)
    assert snap.running and snap.pace == 2.0 and snap.eta_s == 30.0
    assert snap.steps["screen"].in_flight == 3 and snap.steps["screen"].answers == 3
    assert snap.steps["label"].in_flight == 1 and snap.steps["label"].answers == 0
    assert snap.unheld == {EP: 7}  # earlier runs' 2 and this run's 5
    assert snap.stalled == {EP: False}
    page = samples(exposition(snap))
    assert value(page, "sparkops_job_step_calls_in_flight", step="label") == 1


# ---- `sparkops batch metrics DIR [--textfile PATH]` --------------------------------------------
def test_batch_metrics_prints_and_writes_a_textfile_node_exporter_reads(tmp_path):
    job = make_job(tmp_path)
    printed = sparkops("batch", "metrics", str(job), limit=60, check=True)
    page = samples(printed.stdout)
    assert value(page, "sparkops_job_records_done_total") == 3
    target = tmp_path / "textfile" / "job.prom"
    target.parent.mkdir()
    sparkops("batch", "metrics", str(job), "--textfile", str(target), limit=60, check=True)
    assert samples(target.read_text()) == page
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # node exporter runs as its own user
    assert [p.name for p in target.parent.iterdir()] == ["job.prom"]  # no temporary left


def test_batch_metrics_refuses_with_the_fix_and_writes_nothing(tmp_path):
    job = make_job(tmp_path)
    wrong = sparkops("batch", "metrics", str(job), "--textfile", str(tmp_path / "job.txt"))
    assert wrong.returncode == 2
    assert "reads only *.prom files; name it job.prom" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    nowhere = sparkops("batch", "metrics", str(job), "--textfile", str(tmp_path / "no/j.prom"))
    assert nowhere.returncode == 2 and "does not exist" in nowhere.stderr
    not_a_job = sparkops("batch", "metrics", str(tmp_path))
    assert not_a_job.returncode == 2 and not_a_job.stdout == ""
    assert not list(tmp_path.glob("*.prom")) and not (tmp_path / "job.txt").exists()
