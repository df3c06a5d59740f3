"""The rendered start-time check (templates/serving/memory-guard.sh.j2), run for real with sh
against the DGX Spark and RTX Spark /proc/meminfo fixtures, and its place in the unit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sparkops.render import render_inventory
from tests.plugins.inventories import make_inventory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "memory"


def render(tmp_path: Path, **extra) -> Path:
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "single", **extra), out)
    return out / "spark-1"


def run_guard(host_dir: Path, drop: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["sh", str(host_dir / "memory-guard.sh")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SPARKOPS_DROP_CACHES": str(drop)},
        timeout=30,
        check=False,
    )
    return done


def test_an_idle_dgx_spark_starts_after_dropping_the_page_cache(tmp_path):
    host = render(
        tmp_path,
        vllm_serving_memory_meminfo_path=str(FIXTURES / "dgx-spark.meminfo"),
        vllm_serving_memory_host_kind="native",
    )
    drop = tmp_path / "drop_caches"
    done = run_guard(host, drop)
    assert done.returncode == 0, done.stderr
    assert drop.read_text() == "3\n"  # what the kernel's vm.drop_caches takes
    assert done.stdout == (
        "sparkops-memory-guard: MemAvailable 123.9 GB -> 123.9 GB (after dropping the page "
        "cache), bar 92.9 GB (native): starting vLLM\n"
    )


def test_a_busy_dgx_spark_is_refused_in_one_line_with_the_fix(tmp_path):
    host = render(
        tmp_path,
        vllm_serving_memory_meminfo_path=str(FIXTURES / "dgx-spark-busy.meminfo"),
        vllm_serving_memory_host_kind="native",
        vllm_serving_memory_margin_gb=10,
    )
    done = run_guard(host, tmp_path / "drop_caches")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "sparkops-memory-guard: refusing to start vLLM (gb10-gemma4-12b-fp8, native): "
        "MemAvailable 86.1 GB (after dropping the page cache) is below the 98.9 GB it needs; fix: "
    )
    assert "lower vllm.kv_cache_memory_bytes" in lines[0]


def test_wsl2_checks_the_linux_side_only(tmp_path):
    host = render(
        tmp_path,
        vllm_serving_memory_meminfo_path=str(FIXTURES / "rtx-spark-wsl2-low.meminfo"),
        vllm_serving_memory_host_kind="wsl2",
    )
    done = run_guard(host, tmp_path / "no-such-dir" / "drop_caches")
    assert done.returncode == 1
    assert "page cache not dropped" in done.stderr
    assert "MemAvailable 5.3 GB" in done.stderr and "below the 8.0 GB" in done.stderr
    assert ".wslconfig" in done.stderr
    ok = render(
        tmp_path / "ok",
        vllm_serving_memory_meminfo_path=str(FIXTURES / "rtx-spark-wsl2.meminfo"),
        vllm_serving_memory_host_kind="wsl2",
    )
    assert run_guard(ok, tmp_path / "drop_caches").returncode == 0


def test_a_missing_meminfo_refuses_with_the_variable_to_fix(tmp_path):
    host = render(tmp_path, vllm_serving_memory_meminfo_path="/nonexistent/meminfo")
    done = run_guard(host, tmp_path / "drop_caches")
    assert done.returncode == 1
    assert "vllm_serving_memory_meminfo_path" in done.stderr
    assert not (tmp_path / "drop_caches").exists()  # refused before touching anything


def test_the_unit_runs_the_check_before_compose_unless_switched_off(tmp_path):
    unit = (render(tmp_path) / "sparkops-serving.service").read_text()
    pre = unit.index("ExecStartPre=/opt/sparkops/serving/memory-guard.sh")
    assert pre < unit.index("ExecStart=/usr/bin/docker compose")
    off = render(tmp_path / "off", vllm_serving_memory_guard=False)
    assert "ExecStartPre" not in (off / "sparkops-serving.service").read_text()


def test_a_path_with_shell_characters_is_refused(tmp_path):
    import pytest

    from sparkops.errors import UserError

    with pytest.raises(UserError, match="vllm_serving_memory_meminfo_path"):
        render(tmp_path, vllm_serving_memory_meminfo_path="/proc/meminfo'; rm -rf /")
