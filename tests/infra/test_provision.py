"""provision.yml on a real systemd Debian amd64 host with its own Docker engine.

One host goes through what a user does: a check-mode run on the fresh host (nothing may
change; the NVIDIA apt repository branch is taken because nvidia-ctk is absent, and its
rendered source is read from the diff), a first converge with the nvidia-ctk fixture present,
and a second converge that must change nothing. testinfra (docker backend) then checks what
the roles left behind. GPU tools come from tests/fixtures/bin (fixtures, see its README).

Deliberate limits here: Debian 12 has no compose v2 package, so container_runtime_compose_required
is false; x86_64 is not a Spark, so spark_preflight_arch_mismatch is warn; no QSFP link exists.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.plugins.hosts import Host, journal, put_fixture, set_gpu_state
from tests.plugins.provision import (
    JOB_USER,
    NVIDIA_REPO,
    Converged,
    prepare,
    provision,
    write_inventory,
)

# Three playbook runs happen in the first test's setup: allow for a loaded 2-core machine.
pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1800)]

# sparkops_cli converges in test_sparkops_cli_role.py: its pip install needs the wheel folder
# that test gives the host (the test bed's containers reach no index through the TLS proxy).
NOT_CLI = ("--skip-tags", "sparkops_cli")


@pytest.fixture(scope="module")
def converged(
    systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory
) -> Converged:
    host = systemd_host(arch="amd64", docker=True)
    prepare(host)
    inventory = write_inventory(tmp_path_factory.mktemp("inventory"), host)

    check = provision(inventory, "--check", "--diff", *NOT_CLI)
    assert check.rc == 0, check.output[-4000:]
    # Check mode on the fresh host must leave it as it was.
    untouched = host.exec(
        "ls /etc/docker /usr/local/bin/sparkops-run /etc/sudoers.d/sparkops-drop-caches"
        " 2>&1; command -v dockerd || true"
    ).stdout
    assert untouched.count("No such file") == 3 and "dockerd" not in untouched, untouched

    put_fixture(host, "nvidia-ctk")
    first = provision(inventory, *NOT_CLI)
    assert first.rc == 0, first.output[-4000:]
    second = provision(inventory, *NOT_CLI)
    print(
        f"\nprovision amd64: check {check.seconds:.0f} s, first converge {first.seconds:.0f} s,"
        f" second converge {second.seconds:.0f} s"
    )
    return Converged(host, inventory, check, first, second)


def test_first_converge_changes_the_fresh_host(converged: Converged) -> None:
    assert converged.first.failed == 0
    assert converged.first.changed >= 10
    assert "GPU NVIDIA GB10, driver 580.95.05, CUDA 13.0" in converged.first.output


def test_second_converge_changes_nothing(converged: Converged) -> None:
    assert converged.second.rc == 0, converged.second.output[-4000:]
    assert (converged.second.changed, converged.second.failed) == (0, 0), converged.second.output


def test_check_mode_takes_the_nvidia_repository_branch_for_the_host_arch(
    converged: Converged,
) -> None:
    """Without nvidia-ctk the role adds NVIDIA's repository; check mode shows what it writes."""
    out = converged.check.output
    assert "Add NVIDIA's container toolkit repository for this architecture" in out
    assert f"+URIs: {NVIDIA_REPO}/amd64" in out
    assert "+Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc" in out
    # The converge itself used the fixture instead and never wrote that source.
    assert not converged.host.testinfra.file(
        "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
    ).exists


def test_docker_runs_with_the_nvidia_runtime(converged: Converged) -> None:
    ti = converged.host.testinfra
    daemon = ti.file("/etc/docker/daemon.json")
    assert daemon.exists and daemon.mode == 0o644
    assert '"path": "nvidia-container-runtime"' in daemon.content_string
    assert ti.service("docker").is_running and ti.service("docker").is_enabled
    runtimes = ti.check_output("docker info --format '{{json .Runtimes}}'")
    assert '"nvidia"' in runtimes
    assert "docker" in ti.user(JOB_USER).groups


def test_pulls_name_the_platform(converged: Converged) -> None:
    profile = converged.host.testinfra.file("/etc/profile.d/sparkops-docker-platform.sh")
    assert "export DOCKER_DEFAULT_PLATFORM=linux/amd64" in profile.content_string
    assert profile.content_string.startswith("#")  # the ansible_managed header


def test_drop_caches_helper_and_narrow_sudoers_rule(converged: Converged) -> None:
    ti = converged.host.testinfra
    helper = ti.file("/usr/local/sbin/sparkops-drop-caches")
    assert helper.mode == 0o755 and helper.user == "root"
    assert "echo 3 > /proc/sys/vm/drop_caches" in helper.content_string
    rule = ti.file("/etc/sudoers.d/sparkops-drop-caches")
    assert rule.mode == 0o440 and rule.user == "root"
    assert ti.run("visudo -c").rc == 0
    allowed = ti.check_output(f"sudo -l -U {JOB_USER}")
    assert 'NOPASSWD: /usr/local/sbin/sparkops-drop-caches ""' in allowed
    assert "(ALL" not in allowed  # nothing broader than the one helper
    # Root-only helper refuses an ordinary user without sudo.
    assert ti.run(f"su {JOB_USER} -c /usr/local/sbin/sparkops-drop-caches").rc == 1
    assert ti.file(f"/var/lib/systemd/linger/{JOB_USER}").exists


def test_job_wrapper_starts_a_transient_unit_with_journal_and_memory_limit(
    converged: Converged,
) -> None:
    ti = converged.host.testinfra
    started = ti.run(
        "sparkops-run --name probe --memory-max 256M -- sh -c 'echo job-output-marker; sleep 60'"
    )
    assert started.rc == 0, started.stderr
    # one unit-name scheme with batch.yml's jobs (issue 31 item 14): sparkops-batch-NAME
    assert "started sparkops-batch-probe.service" in started.stdout
    unit = "sparkops-batch-probe.service"
    try:
        props = ti.check_output(f"systemctl show -p ActiveState -p MemoryMax {unit}")
        assert "ActiveState=active" in props and "MemoryMax=268435456" in props
        assert "job-output-marker" in journal(converged.host, unit, until="job-output-marker")
    finally:
        ti.run(f"systemctl stop {unit}")
    bad = ti.run("sparkops-run --name 'bad name' -- true")
    assert bad.rc == 2 and "may hold only letters" in bad.stderr


@pytest.mark.parametrize(
    ("state", "rc", "words"),
    [
        ("load", 0, "GPU power state ok: 2405 MHz"),
        ("stuck", 2, "stuck in its low-power state: 1005 MHz and 22.1 W"),
        ("idle", 3, "utilisation stayed below 80%"),
    ],
)
def test_gpu_check_flags_the_stuck_low_power_state(
    converged: Converged, state: str, rc: int, words: str
) -> None:
    host = converged.host
    set_gpu_state(host, state)
    try:
        result = host.exec(["sparkops-gpu-check", "--samples", "2", "--interval", "0.1"])
    finally:
        set_gpu_state(host, "load")
    assert result.returncode == rc, result.stdout + result.stderr
    assert words in result.stdout
    if state == "stuck":
        assert "charger at both ends" in result.stdout


def test_earlyoom_runs_with_the_configured_arguments(converged: Converged) -> None:
    ti = converged.host.testinfra
    assert ti.service("earlyoom").is_running
    assert 'EARLYOOM_ARGS="-m 2 -s 80' in ti.file("/etc/default/earlyoom").content_string


def test_unfit_host_stops_in_preflight_before_any_change(converged: Converged) -> None:
    """A Spark-only setting on an x86 host fails in preflight, naming the host and the fix."""
    inventory = write_inventory(
        converged.inventory.parent / "strict",
        converged.host,
        {"spark_preflight_arch_mismatch": "fail"},
    )
    run = provision(inventory)
    assert run.rc != 0 and run.changed == 0
    assert f"{converged.host.name} is x86_64, not aarch64" in run.output
    assert "spark_preflight_arch_mismatch: warn" in run.output
    assert "container_runtime :" not in run.output  # no later role ran
