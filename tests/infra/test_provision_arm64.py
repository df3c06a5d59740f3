"""provision.yml on an arm64 (aarch64) systemd host, the architecture of every GB10 Spark.

The host is emulated through qemu and slow, so this converge is a deliberate subset: the
laptop case (topology wsl2, host kind forced to wsl2 because this is not really WSL), with
`--tags host_tuning` (spark_preflight always runs; container_runtime is left to the amd64
test: installing Docker under emulation takes many minutes). The nvidia-smi fixture reports
the stuck low-power state, so the converge must warn with the cure and still finish.
Idempotence (a second converge with changed=0) is checked on the amd64 host only: under
emulation on a 2-core machine one converge of this subset already takes minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.plugins.hosts import Host, journal
from tests.plugins.playbook import PlaybookRun
from tests.plugins.provision import prepare, provision, write_inventory

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1800)]

LAPTOP_VARS = {
    "sparkops_topology": "wsl2",
    "spark_preflight_host_kind": "wsl2",
    "spark_preflight_arch_mismatch": "fail",  # aarch64 is what a Spark is: no override
    "host_tuning_earlyoom_enabled": False,
    "host_tuning_gpu_check_samples": 2,  # each nvidia-smi fixture call is an emulated python3
    # Above any CI machine's memory, so the headroom warning (the seed's advice) must show.
    "host_tuning_wsl_min_memory_gb": 4096,
}


@dataclass
class Laptop:
    host: Host
    first: PlaybookRun


@pytest.fixture(scope="module")
def laptop(systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory) -> Laptop:
    host = systemd_host(arch="arm64")
    prepare(host, gpu_state="stuck")
    inventory = write_inventory(tmp_path_factory.mktemp("laptop"), host, LAPTOP_VARS)
    first = provision(inventory, "--tags", "host_tuning", timeout=1700)
    assert first.rc == 0, first.output[-4000:]
    print(f"\nprovision arm64 (preflight + host_tuning): converge {first.seconds:.0f} s")
    return Laptop(host, first)


def test_preflight_reads_an_aarch64_gb10_without_warnings(laptop: Laptop) -> None:
    out = laptop.first.output
    assert f"{laptop.host.name}: wsl2, aarch64, GPU NVIDIA GB10, driver 580.95.05, CUDA 13.0" in out
    assert "not aarch64" not in out


def test_converge_warns_about_the_stuck_gpu_with_the_cure(laptop: Laptop) -> None:
    out = laptop.first.output
    assert "WARNING: GPU is stuck in its low-power state: 1005 MHz and 22.1 W" in out
    assert "unplug the charger at both ends" in out


def test_wsl2_memory_headroom_warning_gives_the_seed_advice(laptop: Laptop) -> None:
    out = " ".join(laptop.first.output.split())
    assert "Windows and WSL share only about 32 GB" in out
    assert "clear Linux's page cache" in out
    assert "start jobs with sparkops-run (systemd-run)" in out


def test_converge_installs_the_helpers(laptop: Laptop) -> None:
    assert laptop.first.failed == 0 and laptop.first.changed >= 5


def test_job_wrapper_starts_a_unit_on_arm64(laptop: Laptop) -> None:
    ti = laptop.host.testinfra
    assert ti.file("/usr/local/bin/sparkops-run").mode == 0o755
    assert ti.file("/etc/sudoers.d/sparkops-drop-caches").mode == 0o440
    unit = "sparkops-batch-arm.service"
    started = ti.run("sparkops-run --name arm -- sh -c 'uname -m; sleep 30'")
    assert started.rc == 0, started.stderr
    try:
        assert ti.service(unit).is_running
        assert "aarch64" in journal(laptop.host, unit, until="aarch64")
    finally:
        ti.run(f"systemctl stop {unit}")
