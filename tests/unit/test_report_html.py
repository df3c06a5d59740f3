"""`sparkops report DIR --html` (issue 41 item 3): one self-contained HTML file, opened in a
real headless Chromium with the network off (tests/plugins/browser.py): every section renders,
every plot loads from inside the file, no console error, no request leaves the page, and no
record text or id is in it.

The job folder is a real `sparkops batch run` against the fault server (a record error,
/metrics samples), placed as a level of a sweep so the sweep's section shows too.
"""

from __future__ import annotations

import json
import shutil
import stat

import pytest

from tests.plugins.browser import open_page
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import ONE_STEP, FaultServer, status, write_records

SECTIONS = [
    "figures", "timeline", "bottleneck", "decisions", "errors", "truncated", "steps",
    "serving", "host", "sweep",
]  # fmt: skip
# The server's message for the refused record: it quotes the record, as a 422 can.
QUOTING = "cannot read 'note r3' here"


@pytest.fixture(scope="module")
def sweep_level(tmp_path_factory):
    """A job folder of 12 records (r3 refused with HTTP 400, its server message quoting the
    record) that is a level of a sweep (sweep.json and a plot beside it)."""
    root = tmp_path_factory.mktemp("html")
    server = FaultServer().start()
    try:
        return _job(root, server)
    finally:
        server.close()


def _job(root, server):
    server.content = "yes"
    server.script("r3", status(400, message=QUOTING))
    pipeline = root / "pipe.yaml"
    pipeline.write_text(ONE_STEP)
    job = {"pipeline": pipeline, "input": root / "in.jsonl", "out": root / "sweep/level-00004"}
    job["out"].parent.mkdir()
    write_records(job["input"], 12)
    done = sparkops(*batch_run(job, server.url), limit=120)
    assert done.returncode == 3, done.stderr  # finished, with r3's record error
    # the host as the run ended, however short the run (a loaded machine once ended it first)
    readings = [json.loads(line) for line in (job["out"] / "host.jsonl").read_text().splitlines()]
    assert readings[-1]["done"] == 12, readings
    sparkops("report", str(job["out"]), limit=120, check=True)  # throughput.png, report.md
    shutil.copy(job["out"] / "throughput.png", job["out"].parent / "records_per_min.png")
    levels = [
        {"concurrency": 1, "records_per_min": 30.5, "hit_rate": 0.5, "bottleneck": "client"},
        {"concurrency": 4, "records_per_min": 98.25, "hit_rate": 0.52, "bottleneck": "gpu"},
    ]
    (job["out"].parent / "sweep.json").write_text(json.dumps({"levels": levels}))
    return job["out"]


def test_the_html_report_renders_every_section_offline_in_chromium(sweep_level):
    made = sparkops("report", str(sweep_level), "--html", limit=120, check=True)
    path = sweep_level / "report.html"
    assert made.stdout.strip() == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    load = open_page(path)
    assert load.errors == []
    # the file itself, then its own inline plots (data: URLs): nothing leaves the page
    assert load.requests[0] == path.resolve().as_uri()
    inline = load.requests[1:]  # (Chromium asks once for identical data: URLs)
    assert inline and all(u.startswith("data:image/png;base64,") for u in inline)
    assert [s["id"] for s in load.sections] == SECTIONS
    for section in load.sections:
        assert section["height"] > 0 and section["text"] > 0, section
        assert all(section["images"]), section  # every plot decoded from inside the file
    shown = {s["id"]: s for s in load.sections}
    # throughput, load, hit rate per step, the host's memory and disk (host.jsonl)
    assert len(shown["timeline"]["images"]) == 4
    assert shown["sweep"]["tables"] == 1 and len(shown["sweep"]["images"]) == 1
    assert load.title == "Batch report: level-00004"


def test_the_html_report_holds_no_record_text_and_names_errors_by_status(sweep_level):
    sparkops("report", str(sweep_level), "--html", limit=120, check=True)
    text = (sweep_level / "report.html").read_text()
    assert "[id:" not in text and "note r" not in text and QUOTING not in text
    assert "<td>http_status</td><td>HTTP 400</td>" in text.replace("\n", "")
    assert "98.2" in text  # the sweep's level, formatted
    assert "http://" not in text.split("<body>")[0]  # nothing to fetch in the head
    assert "<script" not in text


def test_the_browser_check_catches_a_page_that_reaches_out_or_errs(tmp_path):
    """The harness can fail: a page that asks the network for an image, and one that logs an
    error, are both caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><head><title>bad</title></head><body><section id="a">x'
        '<img src="https://example.com/p.png"></section>'
        '<script>console.error("boom")</script></body></html>'
    )
    load = open_page(page)
    assert "https://example.com/p.png" in load.requests
    assert any("boom" in e for e in load.errors)
    assert load.sections[0]["images"] == [False]


def test_a_folder_that_is_no_job_is_refused_with_the_fix(tmp_path):
    refused = sparkops("report", str(tmp_path), "--html", limit=60)
    assert refused.returncode == 2
    assert refused.stderr.startswith("sparkops: error:") and refused.stdout == ""
    assert not (tmp_path / "report.html").exists()
