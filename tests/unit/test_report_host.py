"""The report's host section (sparkops.report.host, issue 39 item 2): host.jsonl's readings
beside the job's timeline in report.json, report.md and the HTML report; driver errors and
restarts placed at their time; what the watch could not read said as unknown, never as zero;
a server restart seen in its /metrics counters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sparkops.jobdir.job_report import JobReport
from sparkops.metrics.host import HOST_FILE, HostReading
from sparkops.metrics.timeline import TimelineSample
from sparkops.report.host import TABLE_ROWS, markdown_lines, server_restarts, summarise
from sparkops.report.html import job_sections
from sparkops.report.render import write_report

FIXTURE = Path(__file__).parent.parent / "fixtures" / "jobdirs" / "pipeline"
START = 1_790_001_000.0  # the fixture job's first run starts here (runs.jsonl)
GIB = 1 << 30
OLD = {"sparkops-vllm-1": {"restarts": 0, "started": "2026-12-05T08:00:00Z"}}
NEW = {"sparkops-vllm-1": {"restarts": 1, "started": "2026-12-05T09:30:00Z"}}


def _reading(i: int, **changed: Any) -> dict[str, Any]:
    """Reading i, a minute apart: memory falling, large blocks running out."""
    return {
        "t": START + 60 * i,
        "run": 1 if i < 15 else 2,
        "host": "spark-1",
        "done": 10 * i,
        "mem_available": (60 - i) * GIB,
        "mem_free": (20 - i // 2) * GIB,
        "high_order_free": (30 - i) * GIB,
        "disk_free": (200 - i) * GIB,
        "nvrm": {},
        "containers": OLD,
        **changed,
    }


READINGS = [
    _reading(0, unknown={"fragmentation": "/proc/buddyinfo could not be read"}),
    *[_reading(i) for i in range(1, 20)],
]
READINGS[7]["nvrm"] = {"NV_ERR_NO_MEMORY": 2, "Xid 31": 1}
for later in READINGS[16:]:
    later["containers"] = NEW  # restarted between readings 15 and 16


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """The pipeline job fixture with a day's host readings (20 here, a minute apart)."""
    directory = tmp_path / "job"
    shutil.copytree(FIXTURE, directory)
    text = "".join(json.dumps(r) + "\n" for r in READINGS)
    (directory / HOST_FILE).write_text(text + '[1, 2]\n{"run": 3}\n')  # two unreadable lines
    return directory


def test_report_json_and_md_show_the_host_beside_the_timeline(job: Path) -> None:
    report = write_report(job)
    host = report.host
    assert host is not None and host.host == "spark-1" and host.readings == 20
    assert (host.mem_available_min, host.mem_free_min) == (41 * GIB, 11 * GIB)
    assert (host.high_order_free_first, host.high_order_free_min) == (30 * GIB, 11 * GIB)
    assert (host.disk_free_min, host.disk_free_last) == (181 * GIB, 181 * GIB)
    assert host.nvrm == {"NV_ERR_NO_MEMORY": 2, "Xid 31": 1}
    assert host.container_restarts == 1
    assert host.unknown == {"fragmentation": "/proc/buddyinfo could not be read"}
    # the table: the first and last readings, both events, evenly spread ones between
    at = [row.at_s for row in host.rows]
    assert len(host.rows) <= TABLE_ROWS and at == sorted(at)
    assert {0.0, 7 * 60.0, 16 * 60.0, 19 * 60.0} <= set(at)
    by_time = {row.at_s: row for row in host.rows}
    assert (by_time[0.0].nvrm, by_time[7 * 60.0].nvrm) == (0, 3)
    assert (by_time[0.0].restarts, by_time[16 * 60.0].restarts) == (0, 1)
    # report.json reads back as written
    written = json.loads((job / "report.json").read_text())
    assert JobReport.from_json(written).host == host
    md = (job / "report.md").read_text()
    section = md[md.index("Host while the job ran (spark-1, 20 readings in host.jsonl):") :]
    assert "- Lowest MemAvailable 41.0 GiB, lowest MemFree 11.0 GiB." in section
    assert (
        "- **GPU driver errors during the job: NV_ERR_NO_MEMORY x2, Xid 31 x1 (kernel log): "
        "reboot the Spark before the next day-long job" in section
    )
    assert "- **Serving container restarts during the job (Docker): 1.**" in section
    assert "| 420 | 1 | 70 | 53.0 | 17.0 | 23.0 | 193.0 | 3 | 0 |" in section


def test_the_html_report_has_a_host_section_and_plots_it_on_the_timeline(job: Path) -> None:
    sections = {s.id: s for s in job_sections(job)}
    assert list(sections)[-1] == "host"
    host = sections["host"]
    assert any(p.kind == "warn" and "NV_ERR_NO_MEMORY x2" in p.text for p in host.paragraphs)
    (table,) = host.tables
    assert table.caption == "Readings on spark-1, on the job's timeline"
    assert table.head[0] == "Time (s)" and len(table.rows) <= TABLE_ROWS
    assert [i.alt for i in sections["timeline"].images][-1] == "the host's free memory and disk"


def test_what_the_watch_could_not_read_is_unknown_with_its_reason() -> None:
    unread = [
        HostReading(
            START,
            1,
            "spark-1",
            0,
            40 * GIB,
            5 * GIB,
            None,
            100 * GIB,
            None,
            None,
            {"kernel log": "journalctl: this user may not read the system journal"},
        )
    ]
    summary = summarise(unread, [], START)
    assert summary is not None
    assert summary.nvrm is None and summary.container_restarts is None
    md = "\n".join(markdown_lines(summary))
    assert (
        "- GPU driver errors during the job: unknown (journalctl: this user may not read the "
        "system journal)." in md
    )
    assert "none" not in md  # unknown is never said as none


def test_a_job_from_before_host_readings_has_no_host_section() -> None:
    assert summarise([], [], None) is None
    report = JobReport.from_json({"records": 3})
    assert report.host is None


def _sample(t: float, endpoint: str, tokens: float | None) -> TimelineSample:
    values = {} if tokens is None else {"prompt_tokens": tokens, "running": 3.0}
    return TimelineSample(t, 1, endpoint, values, 0, 0, 0.0)


def test_a_server_restart_shows_as_its_counters_going_back() -> None:
    samples = [
        _sample(1, "a", 100),
        _sample(2, "a", None),  # a failed scrape says nothing
        _sample(3, "a", 40),  # restarted between 1 and 3
        _sample(4, "a", 90),
        _sample(1.5, "b", 10),
        _sample(2.5, "b", 10),  # still: no restart
    ]
    assert server_restarts(samples) == {"a": 1, "b": 0}
    summary = summarise([], samples, None)  # no host.jsonl, yet a restart to say
    assert summary is not None and summary.readings == 0
    assert summary.server_restarts == {"a": 1, "b": 0}
