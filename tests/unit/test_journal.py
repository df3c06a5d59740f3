"""The job directory: torn-tail repair, resume by id, fingerprint refusal, private files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sparkops.errors import UserError
from sparkops.jobdir import lines
from sparkops.jobdir.durable import repair_torn_tail
from sparkops.jobdir.folder import RESULTS, prepare_dir
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.status import error_causes
from tests.plugins.job_dir import manifest


def line(rid, status="done"):
    return {"id": rid, "status": status, "final": "yes", "steps": [], "error": None, "line": 1}


def test_torn_last_line_is_cut_and_its_record_resent(tmp_path):
    path = tmp_path / RESULTS
    path.write_bytes(b'{"id":"a","status":"done"}\n{"id":"b","status":"do')
    assert repair_torn_tail(path) == len(b'{"id":"b","status":"do')
    assert path.read_bytes() == b'{"id":"a","status":"done"}\n'
    assert repair_torn_tail(path) == 0
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b'{"id":"only-partial"')
    repair_torn_tail(whole)
    assert whole.read_bytes() == b""


def test_journal_resumes_with_finished_ids_and_counts(tmp_path):
    assert prepare_dir(tmp_path / "job", manifest(), restart=False) is False
    j = Journal(tmp_path / "job", "id", fsync_interval=0)
    j.open()
    j.append(line("a"))
    j.append(line("b", "error"))
    j.append({"id": None, "line": 7, "status": "error", "error": "line 7: not valid JSON"})
    j.close()
    with (tmp_path / "job" / RESULTS).open("ab") as fh:
        fh.write(b'{"id":"c","sta')  # the client died mid-write
    assert prepare_dir(tmp_path / "job", manifest(), restart=False) is True
    j2 = Journal(tmp_path / "job", "id")
    j2.open()
    assert j2.done == {"a", "b", lines.LineKey(7)}
    assert (j2.done_ok, j2.done_err) == (1, 2)
    j2.close()
    written = (tmp_path / "job" / RESULTS).read_text().splitlines()
    assert [json.loads(x)["id"] for x in written] == ["a", "b", None]


def test_files_are_private(tmp_path):
    prepare_dir(tmp_path / "job", manifest(), restart=False)
    j = Journal(tmp_path / "job", "id")
    j.open()
    j.close()
    for name in ("manifest.json", RESULTS):
        assert stat.S_IMODE((tmp_path / "job" / name).stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "job").stat().st_mode) == 0o700


@pytest.mark.parametrize("change", [{"pipeline_fingerprint": "p2"}, {"input_fingerprint": "i2"}])
def test_changed_job_refuses_to_resume_unless_restart(tmp_path, change):
    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    (job / RESULTS).write_text(json.dumps(line("a")) + "\n")
    with pytest.raises(UserError, match="--restart"):
        prepare_dir(job, manifest(**change), restart=False)
    assert (job / RESULTS).exists()  # nothing touched
    assert prepare_dir(job, manifest(**change), restart=True) is False
    assert not (job / RESULTS).exists()
    (backup,) = job.glob("previous-*")
    assert json.loads((backup / RESULTS).read_text())["id"] == "a"  # kept, not deleted
    assert json.loads((job / "manifest.json").read_text()) == manifest(**change).to_json()


def _line_error(obj):
    return lines.outcome(obj).error


def test_line_error_reads_pipeline_and_openai_lines():
    assert _line_error({"status": "done"}) is None
    assert _line_error({"status": "error", "error": "HTTP 401: no"}) == "HTTP 401: no"
    ok = {"error": None, "response": {"status_code": 200, "body": {}}}
    assert _line_error(ok) is None
    http = {"error": None, "response": {"status_code": 400, "body": {"error": {"message": "m"}}}}
    assert _line_error(http) == "HTTP 400: m"
    assert _line_error({"error": {"code": "timeout", "message": "timed out"}}) == "timed out"


def test_errors_are_grouped_by_the_failure_s_typed_cause(tmp_path):
    """The run summary's causes come from `failure.cause` (a pipeline line, an OpenAI meta
    line), never from parsing the message; a line from before failures were typed counts
    under its message as written."""
    fixtures = Path(__file__).parent.parent / "fixtures" / "jobdirs"
    pipeline, openai = fixtures / "pipeline", fixtures / "openai"
    assert error_causes(pipeline) == {
        "HTTP 400: too long N": 6,
        "line N: no field text": 2,
    }
    assert error_causes(openai) == {
        "HTTP 400: bad prompt N": 6,
        "timed out": 2,
    }
    (tmp_path / RESULTS).write_text(
        '{"id": "a", "status": "error", "error": "HTTP 503", "line": 1}\n'
        '{"id": "b", "status": "done", "final": "x", "error": null, "line": 2}\n'
    )
    assert error_causes(tmp_path) == {"HTTP 503": 1}
    assert [o.cause for o in lines.outcomes(pipeline / RESULTS) if not o.ok][:1] == [
        "HTTP 400: too long N"
    ]
