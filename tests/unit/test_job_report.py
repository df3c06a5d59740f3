"""The typed report (jobdir/job_report.JobReport) and the readers' folder handle
(jobdir/reader.JobFolder): report.json is written from the record and reads back into it,
older and damaged reports read leniently, and every reader reads fields through the handle.

The compatibility fixtures (tests/fixtures/jobdirs) hold job folders written by the kit at
aef35b7; `*.expected.json` holds the report that kit computed from them, so its `report` is a
report.json of an older kit, without the figures added since.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from sparkops.errors import UserError
from sparkops.jobdir import folder
from sparkops.jobdir.job_report import JobReport, PrefixRecord, PrefixStep, StepRow
from sparkops.jobdir.reader import JobFolder
from sparkops.plan.calibrate import from_report
from sparkops.report.cli import _report
from sparkops.report.compute import compute_report, load_dir
from sparkops.report.render import markdown, write_report

FIXTURES = Path(__file__).parent.parent / "fixtures" / "jobdirs"
SRC = Path(__file__).parent.parent.parent / "src" / "sparkops"
KINDS = ("pipeline", "openai")


def job(tmp_path: Path, kind: str) -> Path:
    directory = tmp_path / kind
    shutil.copytree(FIXTURES / kind, directory)
    return directory


def old_report(kind: str) -> dict:
    """report.json as the kit of aef35b7 computed it from the fixture."""
    return json.loads((FIXTURES / f"{kind}.expected.json").read_text())["report"]


@pytest.mark.parametrize("kind", KINDS)
def test_report_json_is_written_from_the_record_and_reads_back_into_it(kind, tmp_path):
    directory = job(tmp_path, kind)
    report = write_report(directory)
    text = (directory / "report.json").read_text()
    on_disk = json.loads(text)
    assert on_disk == report.to_json()
    # the keys in the record's order, as the dict the report was before
    assert list(on_disk) == [f.name for f in dataclasses.fields(JobReport)]
    assert JobFolder(directory).report() == report  # every field, nested rows included
    assert JobReport.from_json(on_disk).to_json() == on_disk
    assert (directory / "report.md").read_text() == markdown(report, kind)


def test_the_report_command_prints_report_json_as_written(tmp_path, capsys):
    directory = job(tmp_path, "pipeline")
    args = argparse.Namespace(dir=directory, json=True, html=False, methods=False, pipeline=None)
    assert _report(args) == 0
    assert capsys.readouterr().out == (directory / "report.json").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_an_older_kits_report_reads_with_its_figures_and_defaults_for_the_rest(kind, tmp_path):
    old = old_report(kind)
    report = JobReport.from_json(old)
    assert report.records == 30 and report.done == old["done"] and report.errors == 8
    assert report.computed_tok_s == old["computed_tok_s"]
    assert report.schedule == "fifo+prefix" and report.runs == 2
    assert report.stalled_endpoints[0].quiet_s == 130.0
    assert report.stalled_endpoints[0].rejoined_after_s == 61.7
    assert report.serving is not None and report.serving.capacity is not None
    assert report.serving.capacity.over is True and report.serving.capacity.max_num_seqs == 4
    change = report.serving.changes[0]
    assert (change.run, change.records_after, change.between_runs) == (1, 15, False)
    assert [c.field for c in change.changes] == ["model", "root"]
    # figures added after that kit read as "none", not as a crash
    assert report.truncated_answers == {} and report.other_model_answers == ()
    assert report.steady_samples is None and report.usage_impossible_answers == 0
    # what it holds reads back unchanged
    assert {k: v for k, v in report.to_json().items() if k in old} == old
    directory = job(tmp_path, kind)
    (directory / "report.json").write_text(json.dumps(old))
    assert JobFolder(directory).report() == report
    text = markdown(report, kind)
    assert "| Records in input | 30 |" in text
    assert "The serving setup changed 2 time(s) during the job" in text


def test_a_pipeline_reports_prefix_steps_and_step_rows_read_as_records():
    report = JobReport.from_json(old_report("pipeline"))
    assert report.prefix_steps == {"a": PrefixStep(70, 64, 6)}
    assert report.block_size == 16
    a, b = report.steps
    assert isinstance(a, StepRow) and (a.step, a.calls, a.hit_rate) == ("a", 28, 0.5981)
    assert b.cached_tokens is None and b.ceiling is None
    assert report.finals == {"no": 12, "yes": 10}


def test_an_early_kits_report_reads_and_renders():
    """The shape of the first report.json (889f16b): other rate names, no steps, serving or
    stalls. Keys no field knows are ignored."""
    early = {
        "records": 300,
        "finished": 300,
        "done": 298,
        "errors": 2,
        "calls": 700,
        "calls_per_record": 2.349,
        "records_per_min": 45.2,
        "records_per_min_steady": 50.1,
        "prompt_tokens_per_s": 900.0,
        "generation_tokens_per_s": 40.0,
        "prefix_cache_hit_rate": 0.9,
        "prefix_cache_hit_rate_ceiling": 0.95,
        "cached_tokens_share": 0.88,
        "prompt_tokens_per_call": 1200.0,
        "completion_tokens_per_call": 3.0,
        "kv_cache_usage_max": 0.3,
        "preemptions": 0,
        "block_size": 16,
        "prefix_steps": None,
        "runs": 1,
        "wall_s": 400.0,
        "finals": {"yes": 100, "no": 198},
    }
    report = JobReport.from_json(early)
    assert report.records_per_min_steady == 50.1 and report.computed_tok_s is None
    assert report.serving is None and report.steps == () and report.prefix_steps is None
    assert "prompt_tokens_per_s" not in report.to_json()
    text = markdown(report, "early")
    assert "| Records/min (steady, middle of run) | 50.1 |" in text
    assert "| Computed tok/s (steady: computed prompt + generated) | - |" in text
    assert "| yes | 100 | 33.6% |" in text


@pytest.mark.parametrize(
    ("value", "its_type"),
    [("text", "str | None"), (-1.5, "float | None"), (True, None), ([1, 2], None), (None, None)],
)
def test_every_field_of_the_wrong_type_reads_as_its_default(value, its_type):
    """Only the fields declared with the value's type take it; a true is not a count, a list
    of numbers holds no rows."""
    report = JobReport.from_json({f.name: value for f in dataclasses.fields(JobReport)})
    taken = {f.name: value for f in dataclasses.fields(JobReport) if f.type == its_type}
    assert report == dataclasses.replace(JobReport(), **taken)
    assert JobReport.from_json(json.loads(json.dumps(report.to_json()))) == report
    assert "| Records in input | 0 |" in markdown(report, "hostile")


def test_objects_where_the_report_has_none_read_empty():
    report = JobReport.from_json({f.name: {"a": "b"} for f in dataclasses.fields(JobReport)})
    assert report.finals == {} and report.truncated_answers == {} and report.prefix_steps == {}
    assert report.serving is not None and report.serving.changes == ()
    assert report.serving.kit_version is None and report.serving.capacity is None
    assert report.host is not None and report.host.readings == 0 and report.host.rows == ()
    assert report.host.nvrm is None and report.host.server_restarts == {}  # unknown, not none
    assert dataclasses.replace(report, prefix_steps=None, serving=None, host=None) == JobReport()
    assert "Kit version: None" in markdown(report, "hostile")


def test_damaged_rows_inside_a_report_are_skipped_or_read_leniently():
    report = JobReport.from_json(
        {
            "steps": [{"step": "a", "calls": "many", "verdict": 3}, "not a row"],
            "truncated_answers": {"a": {"cut": 2, "answers": "x"}, "b": 7},
            "finals": {"yes": 3, "no": "four"},
            "prefix_steps": {"a": {"shared_tokens": 5}, "b": []},
            "serving": {"changes": [{"changes": [{"field": "model", "after": 1}, 2]}]},
            "stalled_endpoints": [{"endpoint": None, "run": 2}],
        }
    )
    (row,) = report.steps
    assert (row.step, row.calls, row.verdict, row.hit_rate) == ("a", 0, "", None)
    assert report.truncated_answers["a"].answers == 0 and "b" not in report.truncated_answers
    assert report.finals == {"yes": 3}
    assert report.prefix_steps == {"a": PrefixStep(5, 0, 0)}
    assert report.serving is not None
    (change,) = report.serving.changes
    assert change.changes[0].before is None and change.changes[0].after == "1"
    assert report.stalled_endpoints[0].run == 2
    assert "Step a: 2 of 0 answers were cut off" in markdown(report, "damaged")


def test_no_report_or_an_unreadable_one_is_none_through_the_handle(tmp_path):
    directory = job(tmp_path, "pipeline")
    assert JobFolder(directory).report() is None
    for text in ("", "[1, 2]", '{"records": 3', "\xff"):
        (directory / "report.json").write_text(text, encoding="latin-1")
        assert JobFolder(directory).report() is None, text


# ---- the planner reads the report's fields ---------------------------------------------------
def test_calibration_reads_a_job_report_by_its_fields(tmp_path):
    directory = job(tmp_path, "pipeline")
    write_report(directory)
    for given in (directory, directory / "report.json"):
        measured = from_report(given)
        assert measured.computed_tok_s == 80.0 and measured.hit_rate == 0.8
        assert measured.prompt_tokens == pytest.approx(81.9 * 2.0)
        assert measured.gen_tokens == pytest.approx(13.4 * 2.0)
        assert measured.records_per_min == 14.0 and measured.bottleneck == "kv-cache"


def test_calibration_on_an_older_or_damaged_report_reads_what_it_has(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**old_report("openai"), "calls_per_record": "2", "bottleneck": 7}))
    measured = from_report(path)
    assert measured.computed_tok_s == old_report("openai")["computed_tok_s"]
    assert measured.prompt_tokens is None and measured.gen_tokens is None  # no calls per record
    assert measured.bottleneck is None


def test_calibration_refuses_a_folder_without_a_report_naming_the_fix(tmp_path):
    directory = job(tmp_path, "pipeline")
    with pytest.raises(UserError, match=r"report\.json.*written by `sparkops report`"):
        from_report(directory)
    (directory / "report.json").write_text("[]")
    with pytest.raises(UserError, match="written by `sparkops report`"):
        from_report(directory)


# ---- the handle ------------------------------------------------------------------------------
def test_the_handle_reads_every_file_of_a_job_folder(tmp_path):
    directory = job(tmp_path, "openai")
    folder_ = JobFolder(directory)
    assert JobFolder.of(folder_.files.results) == folder_ == JobFolder.of(directory)
    assert folder_.manifest().total == 30
    assert folder_.prefix().block_size == 16
    assert sum(1 for _ in folder_.finished()) == 30  # the torn tail is not a line
    assert sum(1 for _ in folder_.meta_timings()) == 30
    assert [r.event for r in folder_.runs()][:1] == ["start"]
    assert sum(1 for _ in folder_.timeline()) > 0
    assert sum(1 for _ in folder_.serving()) > 0
    names = {
        folder_.files.report_json.name,
        folder_.files.report_md.name,
        folder_.files.plot.name,
        folder_.files.serving.name,
        folder_.files.timeline.name,
        folder_.files.prefix.name,
    }
    assert names <= set(folder.JOB_FILES)


def test_a_missing_or_damaged_prefix_record_reads_empty(tmp_path):
    directory = job(tmp_path, "pipeline")
    (directory / "prefix.json").write_text('{"block_size": "16", "steps": [1]}')
    assert JobFolder(directory).prefix() == PrefixRecord()
    (directory / "prefix.json").unlink()
    assert JobFolder(directory).prefix() == PrefixRecord()
    report = compute_report(load_dir(directory))
    assert report.prefix_cache_hit_rate_ceiling is None and report.prefix_steps is None


# jobdir/folder.py's names of the job files (RESULTS = "results.jsonl", ...)
JOB_FILE_CONSTANTS = {n for n in dir(folder) if n.isupper() and isinstance(getattr(folder, n), str)}
JOB_FILE_NAMES = {getattr(folder, n) for n in JOB_FILE_CONSTANTS}


def path_joins(source: str) -> list[str]:
    """The job-folder path joins in `source`: `x / NAME` of a job file's constant or name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if (isinstance(right, ast.Name) and right.id in JOB_FILE_CONSTANTS) or (
                isinstance(right, ast.Constant) and right.value in JOB_FILE_NAMES
            ):
                found.append(ast.unparse(node))
    return found


def test_no_reader_joins_a_job_folder_path_itself():
    """report, compare, bench and plan find a job's files through jobdir's handle."""
    joins = {
        str(path.relative_to(SRC)): path_joins(path.read_text(encoding="utf-8"))
        for package in ("report", "compare", "bench", "plan")
        for path in sorted((SRC / package).glob("*.py"))
    }
    assert {k: v for k, v in joins.items() if v} == {}


def test_the_path_join_check_sees_a_join():
    assert path_joins("d / RESULTS\nd / 'report.json'\nd / 'sweep.json'\nx / 2") == [
        "d / RESULTS",
        "d / 'report.json'",
    ]
