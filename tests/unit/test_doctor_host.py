"""The Spark's own failure modes before a day-long job (sparkops.doctor.host), judged on
captured text: kernel log lines in the form the public GB10 reports quote, /proc/buddyinfo of a
fresh and of a fragmented host, /proc/uptime."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops.doctor.host import (
    buddy_free,
    driver_errors,
    gpu_driver_errors,
    host_uptime,
    memory_fragmentation,
)
from sparkops.doctor.preflight import kernel_log

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
