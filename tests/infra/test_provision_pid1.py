"""provision.yml stops before any change where systemd is not PID 1 (issue 43 item 1).

On a WSL2 distribution without `systemd=true` (or a plain container) the run used to install
packages, rewrite daemon.json and add the docker group member, and only then fail with
"Service is in unknown state". The host here is the test bed's own image started without
systemd (PID 1 is `sleep`), everything else as test_provision.py prepares a host; the run must
refuse in preflight, in check mode and for real, with one line naming the fix, and leave the
host's packages, groups and /etc/docker as they were. A systemd host passes the same check,
and a second run changes nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins.hosts import Host, image_ref, run_docker
from tests.plugins.playbook import PlaybookRun
from tests.plugins.provision import prepare, provision, write_inventory

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1500)]

# What a change would touch: installed packages, users and groups, Docker's settings.
HOST_STATE = (
    "sha256sum /var/lib/dpkg/status /etc/group /etc/passwd; ls -la /etc/docker 2>&1; "
    "getent group docker || echo no docker group"
)


@pytest.fixture(scope="module")
def host_without_systemd(docker_engine: str) -> Iterator[Host]:
    """The test-host image with `sleep` as PID 1: no systemd runs (what WSL2 without
    `systemd=true` gives, and a container started without /sbin/init)."""
    image = image_ref("amd64")
    if run_docker("image", "inspect", image, check=False).returncode:
        pytest.fail(f"Test-host image {image} is missing; run `make testbed`", pytrace=False)
    name = f"sparkops-test-nosystemd-{secrets.token_hex(4)}"
    started = run_docker(
        "run", "--detach", f"--name={name}", f"--hostname={name}",
        "--label=org.sparkops.testbed=amd64", image, "sleep", "infinity", check=False,
    )  # fmt: skip
    if started.returncode:
        pytest.fail(f"Cannot start {name} from {image}: {started.stderr.strip()}", pytrace=False)
    host = Host(name=name, id=started.stdout.strip(), arch="amd64")
    try:
        prepare(host)
        yield host
    finally:
        run_docker("rm", "--force", "--volumes", host.id, check=False)


def refusal_line(run: PlaybookRun, host: Host) -> str:
    """The one output line that names PID 1, the fix and what to run again."""
    words = (
        f"{host.name} does not run systemd as PID 1 (PID 1 is sleep)",
        "so nothing was changed",
        "then run provision.yml again",
    )
    lines = [line for line in run.output.splitlines() if all(w in line for w in words)]
    assert lines, run.output[-4000:]
    return lines[0]


def test_provision_stops_before_any_change_where_systemd_is_not_pid_1(
    host_without_systemd: Host, tmp_path: Path
) -> None:
    host = host_without_systemd
    assert host.exec(["cat", "/proc/1/comm"], check=True).stdout.strip() == "sleep"
    before = host.exec(HOST_STATE).stdout
    inventory = write_inventory(tmp_path / "inventory", host)
    for args in (("--check", "--diff"), ()):
        run = provision(inventory, *args, timeout=900)
        assert run.rc == 2, run.output[-4000:]
        assert run.changed == 0, run.output[-4000:]
        line = refusal_line(run, host)
        assert "a container: run /sbin/init as its command" in line
        assert "`[boot]` then `systemd=true` in /etc/wsl.conf, then `wsl --shutdown`" in line
        # Stopped in preflight: no later role ran, and systemd's own words never came.
        assert "TASK [container_runtime :" not in run.output
        assert "unknown state" not in run.output and "Traceback" not in run.output
        assert host.exec(HOST_STATE).stdout == before

    # A WSL2 host (the inventory says so) is told the WSL2 fix alone.
    wsl = write_inventory(tmp_path / "wsl2", host, {"spark_preflight_host_kind": "wsl2"})
    run = provision(wsl, "--check", timeout=900)
    assert run.rc == 2 and run.changed == 0, run.output[-4000:]
    line = refusal_line(run, host)
    assert (
        "Fix: in the WSL2 distribution put the two lines `[boot]` and `systemd=true` in "
        "/etc/wsl.conf, run `wsl --shutdown` in Windows, open the distribution again" in line
    )
    assert "/sbin/init" not in line
    assert host.exec(HOST_STATE).stdout == before


def test_a_systemd_host_passes_the_check_and_a_second_run_changes_nothing(
    systemd_host, tmp_path: Path
) -> None:
    host: Host = systemd_host("amd64")
    prepare(host)
    inventory = write_inventory(tmp_path / "inventory", host)
    for attempt in ("check", "first", "second"):
        args = ("--tags", "preflight") + (("--check",) if attempt == "check" else ())
        run = provision(inventory, *args, timeout=900)
        assert run.rc == 0, (attempt, run.output[-4000:])
        assert run.changed == 0, (attempt, run.output[-4000:])
        assert "Stop before any change when systemd is not PID 1" in run.output
        assert "does not run systemd as PID 1" not in run.output
