"""A password in `--endpoint` is never written or printed (issue: secrets in URLs).

`http://user:password@host/v1` is a way some deployments pass basic auth; the kit must use
it for the requests and keep it out of every file of the job folder (timeline.jsonl,
serving.jsonl, runs.jsonl, results.jsonl error lines, report.md, report.json) and out of
everything it prints (stdout, stderr, `report`), whatever happened during the job.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.plugins.cli import SPARKOPS, batch_run, finish, sparkops, start
from tests.plugins.fault_server import FaultServer, ok, status, write_records

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
    # /tokenize fails: the warning and prefix.json's note name the endpoint
    fault_server.override("/tokenize", status(500))
    url = credentialed(fault_server.url)
    run = sparkops(*batch_run(job, url, extra=("--fail-fast", "0")), limit=120)
    assert "/tokenize" in run.stderr
    assert run.returncode == 3, run.stderr
    report = sparkops("report", str(job["out"]), limit=60)
    report_json = sparkops("report", str(job["out"]), "--json", limit=60)
    status_ = sparkops("batch", "status", str(job["out"]), limit=60)
    files = every_file(job["out"])
    assert {p.name for p in files} >= {
        "timeline.jsonl", "serving.jsonl", "runs.jsonl", "results.jsonl", "report.md",
        "report.json", "prefix.json",
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


def test_credentials_in_the_url_and_an_api_key_are_refused_before_any_request(
    fault_server: FaultServer, job: dict[str, Path]
):
    """Both would be the Authorization header (aiohttp refuses every such call): one line,
    exit 2, nothing sent, the password not printed."""
    write_records(job["input"], 2)
    url = credentialed(fault_server.url)
    extra = ("--api-key-env", "SPARKOPS_TEST_KEY")
    env = {**os.environ, "SPARKOPS_TEST_KEY": "k"}
    for argv in (
        batch_run(job, url, extra=extra),
        [*SPARKOPS, "bench", "sweep", "--pipeline", str(job["pipeline"]), "--input",
         str(job["input"]), "--out", str(job["out"]), "--endpoint", url, *extra],
    ):  # fmt: skip
        run = sparkops(*argv, limit=60, env=env)
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().splitlines() == [
            f"sparkops: error: --endpoint http://***@127.0.0.1:{fault_server.port} carries "
            "credentials and --api-key-env SPARKOPS_TEST_KEY sets a key: both would be the "
            "Authorization header; keep the key in --api-key-env and take the user:password "
            "out of the URL"
        ]
        assert PASSWORD not in run.stdout + run.stderr
    assert sum(fault_server.requests.values()) == 0 and not fault_server.paths


def test_a_serving_change_and_strict_serving_name_the_endpoint_redacted(
    fault_server: FaultServer, job: dict[str, Path]
):
    """The drift warning, serving.jsonl's change line and --strict-serving's stop line all
    name the endpoint: redacted in each."""
    write_records(job["input"], 40)
    fault_server.default = ok(delay=0.2)  # 40 records, 2 at a time: about 4 s
    url = credentialed(fault_server.url)
    extra = ("--concurrency", "2", "--strict-serving")
    started = time.monotonic()
    proc = start(*batch_run(job, url, extra=extra))
    deadline = started + 60
    # records are being answered (past the pre-job checks and the serving start line)
    while sum(fault_server.answered.values()) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    fault_server.set_identity(max_model_len=1024)  # as if restarted with another flag
    code, out, err = finish(proc, started, limit=120)
    assert code == 1, err
    stop = err.strip().splitlines()[-1]
    assert stop.startswith("sparkops: error: stopped: --strict-serving: endpoint http://***@")
    assert "max_model_len" in stop
    lines = (job["out"] / "serving.jsonl").read_text().splitlines()
    change = json.loads(lines[-1])
    assert change["event"] == "change" and change["endpoint"].startswith("http://***@")
    assert_nowhere(
        {"stdout": out, "stderr": err, **{str(p): t for p, t in every_file(job["out"]).items()}}
    )
