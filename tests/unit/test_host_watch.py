"""The host watch while a job runs (sparkops.batch.host_watch, issue 39 item 2): readings of
fixture /proc files, the kernel log and the serving container into the job folder's host.jsonl,
on an injected clock; the real kernel-log and Docker readers against stand-ins that print what
journalctl and docker print; every source that cannot be read is "unknown" in one line, never
a failed job."""

from __future__ import annotations

import asyncio
import errno
import json
import stat
from pathlib import Path
from typing import Any, cast

import pytest

from sparkops.batch.host_watch import (
    HostSources,
    HostWatch,
    Unreadable,
    deployed_here,
    docker_containers,
    journal_kernel_log,
)
from sparkops.batch.sampler import Sampler
from sparkops.jobdir import lines
from sparkops.jobdir.durable import stop_on_full_disk
from sparkops.jobdir.run import JobRun
from sparkops.jobdir.serving_lines import ServingStart
from sparkops.metrics.host import HOST_FILE
from tests.plugins.job_dir import manifest

DATA = Path(__file__).parent / "data"
HUNG = (DATA / "gb10_nvrm_hang.log").read_text()
GIB = 1 << 30
MEMINFO = """\
MemTotal:       127597904 kB
MemFree:         6291456 kB
MemAvailable:   41943040 kB
Buffers:          204800 kB
"""
# orders 0-10 of 4 KiB pages: 512 blocks of 4 MiB (order 10) = 2 GiB in large blocks
BUDDYINFO = """\
Node 0, zone   Normal   1447    983    567    258    116     34     11      6      4      0    512
"""
CONTAINER = {"sparkops-vllm-1": {"restarts": 0, "started": "2026-12-05T08:00:00.1Z"}}


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _proc(tmp_path: Path) -> HostSources:
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "buddyinfo").write_text(BUDDYINFO)
    return HostSources(tmp_path / "meminfo", tmp_path / "buddyinfo", 4096)


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    return job


def _lines(job: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (job / HOST_FILE).read_text().splitlines()]


def test_readings_go_to_the_job_folder_on_their_own_clock(tmp_path: Path) -> None:
    clock, asked, said = Clock(), [], []

    def kernel_log(since: float, cursor: str | None) -> tuple[str, str | None]:
        asked.append((since, cursor))
        return (HUNG, "s=2") if cursor is None else ("", cursor)

    watch = HostWatch(
        _proc(tmp_path),
        kernel_log=kernel_log,
        containers=lambda: CONTAINER,
        clock=clock,
        wall=lambda: 1_764_921_600.0,
        host="spark-1",
        warn=said.append,
        serving_here=True,
    )
    job = _job(tmp_path)
    assert watch.due()
    first = watch.record(job, 1, 120)
    assert not watch.due()  # the next one after the interval, not on the next sample
    clock.now += watch.interval
    assert watch.due()
    watch.record(job, 1, 180)
    assert first is not None
    assert _lines(job) == [
        {
            "t": 1_764_921_600.0,
            "run": 1,
            "host": "spark-1",
            "done": 120,
            "mem_available": 40 * GIB,
            "mem_free": 6 * GIB,
            "high_order_free": 2 * GIB,
            "disk_free": _lines(job)[0]["disk_free"],
            "nvrm": {"NV_ERR_NO_MEMORY": 2, "Xid 31": 1},
            "containers": CONTAINER,
        },
        {**_lines(job)[0], "done": 180, "nvrm": {}, "disk_free": _lines(job)[1]["disk_free"]},
    ]
    assert _lines(job)[0]["disk_free"] > 0
    # the kernel log from the run's start, then on from where the last read ended
    assert asked == [(1_764_921_600.0, None), (1_764_921_600.0, "s=2")]
    assert said == []


def test_what_cannot_be_read_is_unknown_said_once_in_one_line(tmp_path: Path) -> None:
    said: list[str] = []

    def no_journal(since: float, cursor: str | None) -> tuple[str, str | None]:
        raise Unreadable("journalctl: this user may not read the system journal")

    def no_docker() -> dict[str, dict[str, Any]]:
        raise Unreadable("docker: permission denied while trying to connect")

    clock = Clock()
    watch = HostWatch(
        HostSources(tmp_path / "absent", tmp_path / "absent", 4096),
        kernel_log=no_journal,
        containers=no_docker,
        clock=clock,
        warn=said.append,
        serving_here=True,
    )
    job = _job(tmp_path)
    watch.record(job, 2, 0)
    clock.now += watch.interval
    watch.record(job, 2, 5)
    assert said == [
        f"host watch: unknown while this run lasts: memory ({tmp_path / 'absent'} could not be "
        f"read); fragmentation ({tmp_path / 'absent'} could not be read); kernel log "
        "(journalctl: this user may not read the system journal); container restarts "
        "(docker: permission denied while trying to connect)"
    ]
    first, second = _lines(job)
    assert first["mem_available"] is None and first["nvrm"] is None
    assert first["containers"] is None and first["high_order_free"] is None
    assert set(first["unknown"]) == {"memory", "fragmentation", "kernel log", "container restarts"}
    assert "unknown" not in second  # said once per run


def test_off_the_serving_host_only_memory_and_disk_are_read(tmp_path: Path) -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("a serving-host probe ran on another host")

    job = _job(tmp_path)
    watch = HostWatch(_proc(tmp_path), kernel_log=never, containers=never, warn=never)
    reading = watch.record(job, 1, 0)  # no serving record: decided from it, not here
    assert watch.serving_here is False
    assert reading is not None and reading.nvrm is None and reading.containers is None
    assert reading.mem_free == 6 * GIB


def _serving_start(job: Path, stack: dict[str, Any] | None) -> None:
    line = ServingStart(1.0, 1, 0, 0, {"stack": stack}, {})
    with (job / "serving.jsonl").open("a") as handle:
        handle.write(json.dumps(line.to_json()) + "\n")


def test_the_serving_host_is_the_one_whose_deploy_record_the_job_was_given(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    assert deployed_here(job) is False  # no serving record
    _serving_start(job, {"local": True, "endpoint": "http://127.0.0.1:8000"})
    assert deployed_here(job) is False  # a `sparkops local up` server
    _serving_start(job, {"host": "spark-1", "role": "single", "profile": "gb10-gemma4-12b-fp8"})
    assert deployed_here(job) is True  # batch.yml's --stack-record, the last run's


def test_no_serving_container_is_unknown_restarts_not_none(tmp_path: Path) -> None:
    said: list[str] = []
    watch = HostWatch(
        _proc(tmp_path),
        kernel_log=lambda since, cursor: ("", cursor),
        containers=dict,  # Docker answered: no vLLM container of a compose stack here
        warn=said.append,
        serving_here=True,
    )
    reading = watch.record(_job(tmp_path), 1, 0)
    assert reading is not None and reading.containers is None and reading.nvrm == {}
    assert said == [
        "host watch: unknown while this run lasts: container restarts (Docker lists no "
        "container labelled com.docker.compose.service=vllm)"
    ]


def test_a_reading_that_cannot_be_written_is_a_gap_said_once(tmp_path: Path) -> None:
    said: list[str] = []
    job = _job(tmp_path)
    (job / HOST_FILE).mkdir()  # not a file: every append fails
    clock = Clock()
    watch = HostWatch(_proc(tmp_path), clock=clock, warn=said.append, serving_here=False)
    assert watch.record(job, 3, 0) is None
    clock.now += watch.interval
    assert watch.record(job, 3, 0) is None
    assert len(said) == 1 and said[0].startswith("host watch: a reading was not written (")


def test_a_reading_lost_to_a_full_disk_is_said_only_if_the_job_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job stopped by a full disk says so in its one line; the host watch, which found the
    disk full first, adds no second line about it (CI saw two). Said at the end when the job
    finished all the same (the disk had room again)."""
    import sparkops.batch.host_watch as host_watch

    def full(path: Path, obj: object) -> None:
        raise stop_on_full_disk(OSError(errno.ENOSPC, "No space left on device"), path)

    monkeypatch.setattr(host_watch, "append_json", full)
    said: list[str] = []
    clock = Clock()
    watch = HostWatch(_proc(tmp_path), clock=clock, warn=said.append, serving_here=False)
    job = _job(tmp_path)
    assert watch.record(job, 1, 0) is None
    clock.now += watch.interval
    assert watch.record(job, 1, 0) is None
    assert said == []
    watch.say_held()
    watch.say_held()
    assert len(said) == 1 and "No space left on device" in said[0]
    assert said[0].startswith("host watch: a reading was not written (cannot write ")


def test_an_earlier_jobs_readings_go_aside_with_its_other_files_on_restart(tmp_path: Path) -> None:
    """One `previous-<time>/` holds the whole earlier job, its host readings too (CI saw a
    second folder made for host.jsonl alone)."""
    job = tmp_path / "job"
    with JobRun.open(job, manifest(), key_field="id") as run:
        run.log(lines.RunEvent("start", run.number, 1.0))
        HostWatch(_proc(tmp_path), serving_here=False).record(job, run.number, 0)
    with JobRun.open(job, manifest(), key_field="id", restart=True) as run:
        assert run.number == 1
        run.log(lines.RunEvent("start", run.number, 2.0))
        HostWatch(_proc(tmp_path), serving_here=False).record(job, run.number, 0)
    (backup,) = job.glob("previous-*")
    assert {p.name for p in backup.iterdir()} >= {HOST_FILE, "manifest.json", "runs.jsonl"}
    assert [line["run"] for line in _lines(job)] == [1]
    with JobRun.open(job, manifest(), key_field="id") as run:  # a later run appends
        HostWatch(_proc(tmp_path), serving_here=False).record(job, run.number, 0)
    assert [line["run"] for line in _lines(job)] == [1, 2]


def test_the_sampler_takes_the_host_reading_off_the_event_loop(tmp_path: Path) -> None:
    job = _job(tmp_path)

    class Run:
        directory, number, finished = job, 2, 41

    watch = HostWatch(_proc(tmp_path), serving_here=False)
    sampler = Sampler(
        *(cast(Any, None),) * 2, cast(Any, Run()), *(cast(Any, None),) * 2, host=watch
    )
    asyncio.run(sampler.read_host())
    asyncio.run(sampler.read_host())  # not due again
    assert [(line["run"], line["done"]) for line in _lines(job)] == [(2, 41)]
    Run.finished = 57
    asyncio.run(sampler.read_host(final=True))  # the run's end: read whether due or not
    assert [(line["run"], line["done"]) for line in _lines(job)] == [(2, 41), (2, 57)]


# ---- the real readers against stand-ins --------------------------------------------------------
def _stand_in(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_kernel_log_is_read_from_journalctl_on_from_its_cursor(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    journalctl = _stand_in(
        tmp_path,
        "journalctl",
        f'echo "$@" >> {calls}\n'
        'case "$*" in\n'
        f"  *--since=@*) cat {DATA / 'gb10_nvrm_hang.log'}; echo '-- cursor: s=4a;i=2' ;;\n"
        "  *) echo '-- No entries --' ;;\n"
        "esac\n",
    )
    text, cursor = journal_kernel_log(1_764_921_600.9, None, journalctl)
    assert cursor == "s=4a;i=2" and text == HUNG
    text, cursor = journal_kernel_log(1_764_921_600.9, cursor, journalctl)
    assert cursor == "s=4a;i=2" and "NVRM" not in text
    assert calls.read_text().splitlines() == [
        "--dmesg --no-pager --show-cursor --output=short --since=@1764921600",
        "--dmesg --no-pager --show-cursor --output=short --after-cursor=s=4a;i=2",
    ]


def test_a_journal_this_user_may_not_read_is_unreadable_not_clean(tmp_path: Path) -> None:
    """journalctl as a user outside systemd-journal prints nothing and exits 0: no errors seen
    must not read as no errors."""
    journalctl = _stand_in(
        tmp_path,
        "journalctl",
        "echo 'Hint: You are currently not seeing messages from other users and the system.' >&2\n"
        "echo \"      Users in groups 'adm', 'systemd-journal' can see all messages.\" >&2\n"
        "echo '-- No entries --'\n",
    )
    with pytest.raises(Unreadable, match="systemd-journal group"):
        journal_kernel_log(0.0, None, journalctl)
    with pytest.raises(Unreadable, match="not found"):
        journal_kernel_log(0.0, None, str(tmp_path / "no-journalctl"))
    # a host (a container) without journald: no journal, said as such
    nothing = _stand_in(
        tmp_path,
        "journalctl-none",
        "echo 'No journal files were found.' >&2\necho '-- No entries --'\n",
    )
    with pytest.raises(Unreadable, match=r"^journalctl: this host keeps no journal$"):
        journal_kernel_log(0.0, None, nothing)


def test_the_serving_containers_restarts_come_from_docker_inspect(tmp_path: Path) -> None:
    docker = _stand_in(
        tmp_path,
        "docker",
        'case "$1" in\n'
        '  ps) [ "$5" = "label=com.docker.compose.service=vllm" ] && echo 3f2a9c ;;\n'
        '  inspect) printf "/sparkops-vllm-1\\t2\\t2026-12-06T01:02:03.4Z\\n" ;;\n'
        "esac\n",
    )
    assert docker_containers(docker) == {
        "sparkops-vllm-1": {"restarts": 2, "started": "2026-12-06T01:02:03.4Z"}
    }
    refused = _stand_in(
        tmp_path,
        "docker-refused",
        "echo 'permission denied while trying to connect to the Docker daemon socket' >&2\n"
        "exit 1\n",
    )
    with pytest.raises(Unreadable, match=r"^docker: permission denied while trying"):
        docker_containers(refused)
