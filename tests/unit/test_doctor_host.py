"""The Spark's own failure modes before a day-long job (sparkops.doctor.host), judged on
captured text: kernel log lines in the form the public GB10 reports quote, /proc/buddyinfo of a
fresh and of a fragmented host, /proc/uptime, and what CUDA can allocate against the plan's
GPU memory budget from what nvidia-smi's stand-ins print."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkops.doctor.host import (
    buddy_free,
    cuda_allocatable,
    driver_errors,
    gpu_driver_errors,
    host_uptime,
    memory_fragmentation,
)
from sparkops.doctor.preflight import cuda_memory, host_checks, kernel_log, parse_settings

# The hang signature of NVIDIA/open-gpu-kernel-modules#1358 (journalctl -k form), an Xid, and a
# driver line that is no error: tests/unit/data/gb10_nvrm_hang.log.
HUNG = (Path(__file__).parent / "data" / "gb10_nvrm_hang.log").read_text()
CLEAN = "Dec 01 03:12:44 spark-1 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module\n"
# /proc/buddyinfo, orders 0-10 of 4 KiB pages: after boot most free memory is in 4 MiB blocks;
# after a week (sparkring#173) none is free above 64 KiB.
FRESH = """\
Node 0, zone      DMA      1      1      1      0      2      1      1      0      1      1      3
Node 0, zone    DMA32      6      6      4      5      6      5      5      4      5      4    418
Node 0, zone   Normal   1447    983    567    258    116     34     11      6      4    311  24107
"""
FRAGMENTED = """\
Node 0, zone      DMA      0      0      0      0      0      0      0      0      0      0      0
Node 0, zone   Normal 9120411 3310022 801233  20010    211      3      0      0      0      0      0
"""


def test_the_hang_signature_is_refused_with_a_reboot() -> None:
    check = gpu_driver_errors("journalctl", HUNG)
    assert check.ok is False and check.warning is False
    assert check.detail == (
        "since boot the GPU driver logged NV_ERR_NO_MEMORY x2 (in _memdescAllocInternal), "
        "Xid 31 x1 (journalctl)"
    )
    assert check.fix.startswith("reboot the Spark before a day-long job")
    found = driver_errors(HUNG)
    assert found.xids == {"31": 1} and found.codes == {"NV_ERR_NO_MEMORY": 2}


def test_a_clean_log_passes_and_an_unreadable_one_only_warns() -> None:
    assert gpu_driver_errors("dmesg", CLEAN).ok is True
    assert (
        gpu_driver_errors("journalctl", "").detail == "no NVRM error or Xid since boot (journalctl)"
    )
    unread = gpu_driver_errors("", "", "dmesg: read kernel buffer failed: Operation not permitted")
    assert (unread.ok, unread.warning) == (False, True)
    assert "Operation not permitted" in unread.detail and "become" in unread.fix


def test_the_playbook_s_kernel_log_task_is_read_by_its_first_line() -> None:
    assert kernel_log({"stdout": "source=journalctl\n" + HUNG}) == ("journalctl", HUNG.rstrip(), "")
    assert kernel_log({"stdout": "source=dmesg"}) == ("dmesg", "", "")
    said = "source=none\ndmesg: read kernel buffer failed: Operation not permitted"
    assert kernel_log({"stdout": said})[2].startswith("dmesg: read kernel buffer failed")
    assert kernel_log(None) == ("", "", "")


def test_fragmentation_after_long_uptime_is_refused_and_a_fresh_host_passes() -> None:
    fresh = memory_fragmentation(FRESH, 4096, 2, 1)
    assert fresh.ok is True and fresh.fix == ""
    assert fresh.detail == "96.4 GiB of 96.5 GiB free is in blocks of 2 MiB or more (needs 1)"
    worn = memory_fragmentation(FRAGMENTED, 4096, 2, 1)
    assert worn.ok is False and worn.warning is False
    assert worn.detail.startswith("0.0 GiB of ") and "reboot the Spark" in worn.fix
    # 64 KiB pages (some arm64 kernels): a 2 MiB block is order 5
    assert buddy_free("Node 0, zone Normal 0 0 0 0 0 16\n") == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 16}
    assert memory_fragmentation("Node 0, zone Normal 0 0 0 0 0 16\n", 65536, 2, 0.03).ok is True
    unread = memory_fragmentation("", 4096, 2, 1)
    assert (unread.ok, unread.warning) == (False, True)


@pytest.mark.parametrize(
    ("uptime", "ok", "detail"),
    [
        ("86400.00 170000.00", True, "up 1.0 days (warns past 7)"),
        ("950400.55 1900000.00", False, "up 11.0 days (warns past 7)"),
    ],
)
def test_a_long_uptime_is_a_warning_that_names_the_reboot(uptime, ok, detail) -> None:
    check = host_uptime(uptime, 7)
    assert (check.ok, check.detail, check.warning) == (ok, detail, not ok)
    assert ("reboot the Spark" in check.fix) is (not ok)


# ---- what CUDA can allocate against the plan --------------------------------------------------
BIN = Path(__file__).resolve().parents[1] / "fixtures"
MEMORY = BIN / "memory"


def nvidia_smi(query: str, tool: Path, fixture_dir: Path | None = None) -> dict:
    """What preflight.yml registers for `nvidia-smi QUERY --format=csv,noheader,nounits`, run
    on a stand-in that prints what the real tool prints."""
    env = {"PATH": "/usr/bin:/bin"}
    if fixture_dir is not None:
        env["SPARKOPS_FIXTURE_DIR"] = str(fixture_dir)
    done = subprocess.run(
        [sys.executable, str(tool), query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def busy_dgx_spark(budget: object, *, own_pids: str = "PID\n48213\n", health: int = 200) -> dict:
    """preflight.yml's facts and settings on a busy DGX Spark: nvidia-smi says [N/A] for its
    unified memory; this stack's vLLM (pid 48213) holds 20 GiB; MemAvailable 80.2 GiB."""
    facts = {
        "meminfo": (MEMORY / "dgx-spark-busy.meminfo").read_text(),
        "health": {"status": health},
        "gpu_total": nvidia_smi("--query-gpu=memory.total", BIN / "bin" / "nvidia-smi"),
        "compute_apps": nvidia_smi(
            "--query-compute-apps=pid,process_name,used_memory",
            MEMORY / "nvidia-smi",
            MEMORY / "dgx-spark-busy",
        ),
        "own_pids": {"rc": 0, "stdout": own_pids},
    }
    return host_checks(facts, parse_settings({**SETTINGS, "gpu_memory_gib": budget}))[-1]


# preflight.yml's settings as the play hands them over (vars/preflight.yml's defaults)
SETTINGS = {
    "drop_caches": True,
    "min_available_gib": 8,
    "min_available_gib_wsl2": 16,
    "vllm_url": "http://127.0.0.1:8000",
    "vllm_container": "sparkops-vllm-1",
    "hash_algo": "xxhash",
    "tokens_per_request": 300,
    "max_kv_usage": 0.7,
    "output_dir": "/var/lib/sparkops",
    "min_free_disk_gib": 20,
    "max_uptime_days": 7,
    "fragmentation_block_mib": 2,
    "min_high_order_gib": 1,
    "gpu_memory_gib": "",
    "windows": "auto",
    "wsl_autostart_script": "/opt/sparkops/windows/sparkops-wsl-autostart.cmd",
}


def test_a_budget_above_what_cuda_gets_on_a_gb10_is_refused_naming_the_fix() -> None:
    check = busy_dgx_spark(110)
    assert (check.name, check.ok, check.warning) == ("cuda_allocatable", False, False)
    assert check.detail == (
        "the plan's GPU memory budget is 110 GiB (vllm_serving_gpu_memory_gib), CUDA can "
        "allocate about 100.2 GiB here (MemAvailable + 20.0 GiB this stack's vLLM holds)"
    )
    assert check.fix.startswith(
        "set vllm_serving_gpu_memory_gib to 100 or less in the inventory and redeploy"
    )
    assert "101-102 GiB" in check.fix
    assert busy_dgx_spark("96").ok is True  # the play hands it over as text


def test_a_budget_within_what_cuda_gets_passes_and_none_planned_says_the_figure() -> None:
    check = busy_dgx_spark("")
    assert check.ok is True and check.fix == ""
    assert check.detail == (
        "CUDA can allocate about 100.2 GiB here (MemAvailable + 20.0 GiB this stack's vLLM "
        "holds); no GPU memory budget is planned (vllm_serving_gpu_memory_gib unset)"
    )


def test_a_reading_without_the_running_vllm_s_share_only_warns() -> None:
    """docker top failed: what the running vLLM holds is unknown, so MemAvailable alone is a
    lower bound, and a lower bound refuses nothing."""
    check = busy_dgx_spark(110, own_pids="")
    assert (check.ok, check.warning) == (False, True)
    assert "MemAvailable alone: nvidia-smi does not say what the running vLLM holds" in check.detail
    # vLLM down: nothing of it to add, MemAvailable is the figure and refuses
    assert busy_dgx_spark(110, own_pids="", health=-1).warning is False


def test_under_wsl2_the_gpu_s_own_memory_is_the_figure() -> None:
    facts = {
        "meminfo": (MEMORY / "rtx-spark-wsl2.meminfo").read_text(),
        "gpu_total": nvidia_smi(
            "--query-gpu=memory.total", MEMORY / "nvidia-smi", MEMORY / "rtx-spark-wsl2"
        ),
    }
    found = cuda_memory(facts)
    assert found is not None and found.firm
    assert (found.bytes, found.source) == (91553 << 20, "nvidia-smi memory.total")
    check = cuda_allocatable(found, 96)
    assert check.ok is False and "about 89.4 GiB here (nvidia-smi memory.total)" in check.detail


def test_nothing_to_read_is_a_warning_not_a_pass() -> None:
    check = cuda_allocatable(cuda_memory({}), 110)
    assert (check.ok, check.warning) == (False, True)
    assert check.fix == "run preflight on the Spark itself"
