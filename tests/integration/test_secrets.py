"""A password in `--endpoint` is never written or printed (issue: secrets in URLs).

`http://user:password@host/v1` is a way some deployments pass basic auth; the kit must use
it for the requests and keep it out of every file of the job folder (timeline.jsonl,
serving.jsonl, runs.jsonl, results.jsonl error lines, report.md, report.json) and out of
everything it prints (stdout, stderr, `report`), whatever happened during the job.
"""

from __future__ import annotations

from pathlib import Path

from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import FaultServer, status, write_records

PASSWORD = "s3cr3t-Pa55"
USER = "alice"


def credentialed(url: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{USER}:{PASSWORD}@{rest}"


def every_file(folder: Path) -> dict[Path, str]:
    return {p: p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file()}


def assert_nowhere(texts: dict[str, str]) -> None:
    leaked = [name for name, text in texts.items() if PASSWORD in text]
    assert leaked == []


def test_a_password_in_the_endpoint_is_never_written_or_printed(
    fault_server: FaultServer, job: dict[str, Path]
):
    write_records(job["input"], 12)
    # one record refused for good (a journal error line), one retried through a 503
    fault_server.script("r3", *[status(400, message="bad request")] * 8)
    fault_server.script("r5", status(503))
    url = credentialed(fault_server.url)
    run = sparkops(*batch_run(job, url, extra=("--fail-fast", "0")), limit=120)
    assert run.returncode == 3, run.stderr
    report = sparkops("report", str(job["out"]), limit=60)
    report_json = sparkops("report", str(job["out"]), "--json", limit=60)
    status_ = sparkops("batch", "status", str(job["out"]), limit=60)
    files = every_file(job["out"])
    assert {p.name for p in files} >= {
        "timeline.jsonl", "serving.jsonl", "runs.jsonl", "results.jsonl", "report.md",
        "report.json",
    }  # fmt: skip
    # the redacted endpoint is there (where it was written), the password is not
    assert f"{USER}:" not in files[job["out"] / "timeline.jsonl"]
    assert "127.0.0.1" in files[job["out"] / "timeline.jsonl"]
    assert_nowhere({str(p): t for p, t in files.items()})
    assert_nowhere(
        {
            "run stdout": run.stdout,
            "run stderr": run.stderr,
            "report": report.stdout + report.stderr,
            "report --json": report_json.stdout + report_json.stderr,
            "status": status_.stdout + status_.stderr,
        }
    )


def test_a_password_is_not_printed_when_the_endpoint_is_down(job: dict[str, Path]):
    """The error line of an unreachable credentialed endpoint names it, redacted."""
    write_records(job["input"], 2)
    run = sparkops(*batch_run(job, f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1"), limit=120)
    assert run.returncode == 2
    assert PASSWORD not in run.stdout + run.stderr
    assert "127.0.0.1:9" in run.stderr
