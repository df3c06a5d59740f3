"""container_runtime on hosts the kit has never seen (issue 12, items 5, 6, 8, 10 and 13; issue 24,
items 10-13, 17).

Two amd64 systemd hosts, each with its own Docker engine, walk the states a new Spark owner
meets. Only the container_runtime role (and the always-run preflight) converges here
(`--tags container_runtime`), which keeps each run near a minute on 2 cores.

- A Docker CE host without the compose plugin. No Docker CE repository is reachable from the
  test bed, so tests/fixtures/docker-ce-standin.sh repackages Debian's engine under Docker CE's
  package names and relations (docker.io Conflicts: docker-ce, as in reality). The role must
  stop with the fix while no source offers docker-compose-plugin, leaving Docker CE installed;
  once a stand-in "Docker repository" offers the plugin, check mode must report every change
  the real run then makes, the nvidia runtime wiring and the restart included; the converged
  host then re-converges cut off every network, changing nothing.
- A Debian host: a user in container_runtime_docker_users that does not exist; check mode on
  the fresh host without python3-apt; Debian's docker.io installed and running (as DGX OS ships
  Docker) with /etc/docker/daemon.json a link to a site-managed file, then the kit's first
  converge (daemon options under `runtimes`, and log-driver) killed after daemon.json gained
  the options and the nvidia runtime, before the restart handler ran; the next converge (given
  `-e container_runtime_nvidia_set_default=false`) restarts Docker naming every option the
  engine lacks, writes through the link and installs python3-requests; a re-converge cut off
  every network changes nothing (the deep merge).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.plugins.hosts import (
    Host,
    docker_ce_standin,
    offline,
)
from tests.plugins.playbook import PlaybookRun, parse_recap, start_playbook
from tests.plugins.provision import (
    JOB_USER,
    daemon_json,
    engine_info,
    prepare,
    provision,
    provision_killed_at,
    write_inventory,
)

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1800)]

TAGS = ("--tags", "container_runtime")
GHOST = "ghost-researcher"
ENGINE_FAMILY = ("docker-ce", "docker-ce-cli", "containerd.io")
# The first task after daemon.json is written with the nvidia runtime: killing the run when it
# starts leaves the restart handler notified but never run.
AFTER_WIRING = "TASK [container_runtime : Add the job users to the docker group]"
SITE_FILE = "/etc/site/docker-daemon.json"
# Options under "runtimes" beside the nvidia runtime: a shallow merge dropped runtimes.nvidia,
# which the nvidia task added back, restarting Docker on every converge. data-root spelt other
# than Docker reports it (a trailing slash, through a link to the engine's own folder): the
# same folder to Docker, which once restarted the engine on every converge and then failed
# with "still does not run with what daemon.json says" (issue 34 item 1).
DATA_ROOT_LINK = "/srv/docker-root"
DAEMON_OPTIONS = {
    "log-driver": "local",
    "runtimes": {"runc-alt": {"path": "runc"}},
    "data-root": f"{DATA_ROOT_LINK}/",
}
NVIDIA = {"args": [], "path": "nvidia-container-runtime"}
# Printed once a run holds the host's lock (ansible/playbooks/tasks/host_lock.yml).
LOCK_HELD = "TASK [Stop when another sparkops run still holds this host]"
RESTART = re.compile(r"RUNNING HANDLER \[container_runtime : Restart Docker\][^\n]*\n(changed|ok)")


def installed(host: Host, package: str) -> bool:
    """Whether dpkg lists ``package`` as installed on ``host``."""
    status = host.exec(["dpkg-query", "--show", "--showformat", "${db:Status-Status}", package])
    return status.stdout.strip() == "installed"


def two_at_once(inventory: Path, *args: str) -> tuple[PlaybookRun, PlaybookRun]:
    """provision.yml, and a second provision.yml on the same host started once the first holds
    the host's lock; the first one's output is read on a thread while the second runs."""
    lines: list[str] = []
    holds = threading.Event()
    since = time.monotonic()
    with start_playbook("provision.yml", inventory, *args) as proc:
        assert proc.stdout is not None

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)
                if LOCK_HELD in line:
                    holds.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert holds.wait(timeout=600), "".join(lines)[-4000:]
        second = provision(inventory, *args)
        proc.wait(timeout=1200)
        reader.join(timeout=60)
    output = "".join(lines)
    first = PlaybookRun(proc.returncode, output, "", time.monotonic() - since, parse_recap(output))
    return first, second


def docker_started(host: Host) -> str:
    """When the host's Docker engine last started (systemd's monotonic stamp)."""
    show = ["systemctl", "show", "docker", "--property=ActiveEnterTimestampMonotonic", "--value"]
    return host.exec(show, check=True).stdout.strip()


def runtimes(host: Host) -> dict:
    """The runtimes the host's running Docker engine knows."""
    return engine_info(host)["Runtimes"]


@dataclass
class DockerCeHost:
    """A Docker CE host without compose: the refusal, check mode, then the real converge."""

    host: Host
    refused: PlaybookRun
    kept_after_refusal: dict[str, bool]
    check: PlaybookRun
    daemon_after_check: dict
    converge: PlaybookRun
    again_offline: PlaybookRun


@pytest.fixture(scope="module")
def docker_ce(
    systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory
) -> DockerCeHost:
    host = systemd_host(arch="amd64", docker=True)
    prepare(host, tools=("nvidia-smi", "nvidia-ctk"))
    docker_ce_standin(host, "install")
    # The state under test: Docker CE's engine runs, compose v2 is missing.
    assert all(installed(host, p) for p in ENGINE_FAMILY)
    assert "nvidia" not in runtimes(host)
    assert host.exec(["docker", "compose", "version"]).returncode != 0
    inventory = write_inventory(
        tmp_path_factory.mktemp("docker-ce"), host, {"container_runtime_compose_required": True}
    )

    refused = provision(inventory, *TAGS)
    kept = {p: installed(host, p) for p in (*ENGINE_FAMILY, "docker.io")}

    docker_ce_standin(host, "publish")  # now "Docker's repository" offers the compose plugin
    check = provision(inventory, *TAGS, "--check", "--diff")
    assert check.rc == 0, check.output[-4000:]
    daemon_after_check = daemon_json(host)
    converge = provision(inventory, *TAGS)
    assert converge.rc == 0, converge.output[-4000:]
    with offline(host):
        again = provision(inventory, *TAGS)
    print(
        f"\ndocker-ce host: refusal {refused.seconds:.0f} s, check {check.seconds:.0f} s,"
        f" converge {converge.seconds:.0f} s, offline re-converge {again.seconds:.0f} s"
    )
    return DockerCeHost(host, refused, kept, check, daemon_after_check, converge, again)


def test_docker_ce_without_a_compose_source_stops_with_the_fix_and_keeps_the_engine(
    docker_ce: DockerCeHost,
) -> None:
    refused = docker_ce.refused
    assert refused.rc != 0 and refused.changed == 0, refused.output[-4000:]
    assert "Traceback" not in refused.output
    assert "no apt source offers docker-compose-plugin" in refused.text
    assert "Add Docker's apt repository to the apt sources" in refused.text
    assert "container_runtime_compose_required: false" in refused.text
    # Before the fix apt installed docker.io, whose Conflicts removed all three.
    assert docker_ce.kept_after_refusal == {
        "docker-ce": True,
        "docker-ce-cli": True,
        "containerd.io": True,
        "docker.io": False,
    }


def test_check_mode_reports_the_runtime_wiring_and_the_restart(docker_ce: DockerCeHost) -> None:
    out = docker_ce.check.output
    assert "Write daemon.json with the nvidia runtime" in out
    assert '+        "nvidia": {' in out  # the --diff of daemon.json, as nvidia-ctk writes it
    restart = RESTART.search(out)
    assert restart and restart.group(1) == "changed", out[-4000:]
    # Every change the real run makes was announced, and check mode itself changed nothing.
    assert docker_ce.check.changed == docker_ce.converge.changed, (
        docker_ce.check.output + docker_ce.converge.output
    )
    assert docker_ce.daemon_after_check == {}


def test_converge_adds_docker_ce_s_compose_plugin_and_never_docker_io(
    docker_ce: DockerCeHost,
) -> None:
    host = docker_ce.host
    assert all(installed(host, p) for p in (*ENGINE_FAMILY, "docker-compose-plugin"))
    assert not installed(host, "docker.io")
    compose = host.exec(["docker", "compose", "version", "--short"])
    assert compose.returncode == 0 and compose.stdout.strip().startswith("2."), compose
    assert "nvidia" in runtimes(host)
    assert "nvidia" in daemon_json(host)["runtimes"]
    assert "docker" in host.testinfra.user(JOB_USER).groups


def test_the_docker_ce_host_reconverges_offline_changing_nothing(docker_ce: DockerCeHost) -> None:
    run = docker_ce.again_offline
    assert run.rc == 0, run.output[-4000:]
    assert (run.changed, run.failed) == (0, 0), run.output


@dataclass
class Interrupted:
    """A Debian host: a refused ghost user, a killed first converge, its recovery, offline."""

    host: Host
    refused: PlaybookRun
    ghost_exists: bool
    check: PlaybookRun
    untouched_after_check: dict[str, bool]
    daemon_after_kill: dict
    runtimes_after_kill: dict
    recovered: PlaybookRun
    linked: bool
    site_after: dict
    requests_import: int
    offline: PlaybookRun
    docker_started: tuple[str, str]
    second: PlaybookRun


@pytest.fixture(scope="module")
def interrupted(
    systemd_host: Callable[..., Host], tmp_path_factory: pytest.TempPathFactory
) -> Interrupted:
    host = systemd_host(arch="amd64", docker=True)
    prepare(host, tools=("nvidia-smi", "nvidia-ctk"))
    directory = tmp_path_factory.mktemp("interrupted")
    ghost = write_inventory(
        directory / "ghost", host, {"container_runtime_docker_users": [JOB_USER, GHOST]}
    )
    refused = provision(ghost, *TAGS)
    ghost_exists = host.exec(["getent", "passwd", GHOST]).returncode == 0

    inventory = write_inventory(
        directory / "plain", host, {"container_runtime_daemon_options": DAEMON_OPTIONS}
    )
    # A fresh host as a user may have it: without python3-apt (the test image ships it).
    host.exec(["dpkg", "--remove", "python3-apt"], check=True)
    check = provision(inventory, *TAGS, "--check", "--diff")
    untouched = {
        "daemon.json": host.exec(["test", "-e", "/etc/docker/daemon.json"]).returncode == 0,
        "python3-apt": installed(host, "python3-apt"),
        "docker.io": installed(host, "docker.io"),
        "docker group": host.exec(["getent", "group", "docker"]).returncode == 0,
    }
    # Docker already runs, as on DGX OS: the engine is up before daemon.json gains the runtime.
    host.exec(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive"
        " apt-get install -y -qq --no-install-recommends docker.io",
        check=True,
    )
    assert host.exec(["systemctl", "is-active", "docker"]).stdout.strip() == "active"
    assert "nvidia" not in runtimes(host)
    host.exec(["ln", "-s", "/var/lib/docker", DATA_ROOT_LINK], check=True)
    # The site keeps Docker's options elsewhere; /etc/docker/daemon.json links to them.
    host.exec(
        f'mkdir -p /etc/site && echo \'{{"log-level": "info"}}\' > {SITE_FILE}'
        f" && ln -s {SITE_FILE} /etc/docker/daemon.json",
        check=True,
    )
    provision_killed_at(inventory, AFTER_WIRING, *TAGS)
    daemon_after_kill = daemon_json(host)
    runtimes_after_kill = runtimes(host)
    # "false" as -e gives it: a string, which must not make nvidia the default runtime.
    recovered = provision(inventory, *TAGS, "-e", "container_runtime_nvidia_set_default=false")
    assert recovered.rc == 0, recovered.output[-4000:]
    linked = host.exec(["test", "-L", "/etc/docker/daemon.json"]).returncode == 0
    site_after = json.loads(host.exec(["cat", SITE_FILE], check=True).stdout)
    requests_import = host.exec(["python3", "-c", "import requests"]).returncode
    before = docker_started(host)
    with offline(host):
        # Really cut off: no route leaves the host (the apt mirror is unreachable).
        assert host.exec(["ip", "route", "show", "default"]).stdout.strip() == ""
        # Two provisions at once (issue 34 item 5): the second waits for the first, naming it.
        cut_off, second = two_at_once(inventory, *TAGS)
    started = (before, docker_started(host))
    print(
        f"\ninterrupted host: ghost refusal {refused.seconds:.0f} s, recovery"
        f" {recovered.seconds:.0f} s, offline re-converge {cut_off.seconds:.0f} s"
    )
    return Interrupted(
        host,
        refused,
        ghost_exists,
        check,
        untouched,
        daemon_after_kill,
        runtimes_after_kill,
        recovered,
        linked,
        site_after,
        requests_import,
        cut_off,
        started,
        second,
    )


def test_a_docker_user_without_an_account_is_refused_before_any_change(
    interrupted: Interrupted,
) -> None:
    refused = interrupted.refused
    assert refused.rc != 0 and refused.changed == 0, refused.output[-4000:]
    assert "Traceback" not in refused.output
    assert f"container_runtime_docker_users names '{GHOST}'" in refused.text
    assert f"useradd --create-home {GHOST}" in refused.text
    assert not interrupted.ghost_exists


def test_check_mode_on_a_fresh_host_without_python3_apt_shows_the_wiring(
    interrupted: Interrupted,
) -> None:
    check = interrupted.check
    assert check.rc == 0 and check.failed == 0, check.output[-4000:]
    assert "Traceback" not in check.output
    assert "Report that the missing engine and compose packages would be installed" in check.output
    assert re.search(r"would install [^(]*docker\.io", check.text), check.output[-4000:]
    # Reported as a change, not as an ignored "python3-apt must be installed" error (issue 34
    # item 9).
    assert "python3-apt must be installed" not in check.output
    assert '+        "nvidia": {' in check.output  # nvidia-ctk's daemon.json, as a diff
    # The restart is announced (it cannot be simulated: docker.service is not installed yet).
    assert "RUNNING HANDLER [container_runtime : Restart Docker]" in check.output
    assert not any(interrupted.untouched_after_check.values()), interrupted.untouched_after_check


def test_a_killed_first_converge_is_finished_by_the_next_one(interrupted: Interrupted) -> None:
    # The state the kill left: daemon.json names the runtime, the running engine lacks it.
    assert "nvidia" in interrupted.daemon_after_kill["runtimes"]
    assert "nvidia" not in interrupted.runtimes_after_kill
    out = interrupted.recovered.output
    text = interrupted.recovered.text
    assert "Restart Docker because it runs with other settings than daemon.json's" in out
    # The killed run's lock (same controller, its ansible-playbook gone) is taken over at once.
    assert "End the lock holder of a run from this controller that has ended" in out
    # Every option the role manages is compared, not only the nvidia runtime.
    assert "log-driver: daemon.json says local, the engine runs json-file" in text
    assert "runtimes: daemon.json says nvidia, runc-alt, the engine runs" in text
    assert "data-root: daemon.json says" not in text  # Docker's own folder: no difference
    restart = RESTART.search(out)
    assert restart and restart.group(1) == "changed", out[-4000:]
    info = engine_info(interrupted.host)
    assert {"nvidia", "runc-alt"} <= set(info["Runtimes"]) and info["LoggingDriver"] == "local"
    assert info["DefaultRuntime"] == "runc"
    assert info["DockerRootDir"] == "/var/lib/docker"


def test_a_linked_daemon_json_is_written_through_and_merged_deeply(
    interrupted: Interrupted,
) -> None:
    assert interrupted.linked
    assert interrupted.site_after == {
        "log-level": "info",
        "log-driver": "local",
        "data-root": f"{DATA_ROOT_LINK}/",
        "runtimes": {"nvidia": NVIDIA, "runc-alt": {"path": "runc"}},
    }  # and no default-runtime
    assert "is a link to /etc/site/docker-daemon.json" in interrupted.recovered.text
    assert interrupted.requests_import == 0  # community.docker's modules can run on the host


def test_a_converged_host_reconverges_offline_changing_nothing(interrupted: Interrupted) -> None:
    run = interrupted.offline
    assert run.rc == 0, run.output[-4000:]
    assert (run.changed, run.failed) == (0, 0), run.output
    # data-root spelt with a slash and through a link is Docker's own folder: no restart.
    before, after = interrupted.docker_started
    assert before and before == after


def test_a_second_provision_at_once_waits_for_the_first_naming_it(interrupted: Interrupted) -> None:
    """Issue 34 item 5: two provisions at once both failed and removed each other's venv. The
    second waits for the host's lock, saying which run holds it, then converges too."""
    second = interrupted.second
    assert second.rc == 0, second.output[-4000:]
    assert (second.changed, second.failed) == (0, 0), second.output
    assert re.search(
        r"is busy with another sparkops run: provision\.yml started \d{4}-\d\d-\d\d "
        r"\d\d:\d\d:\d\d UTC by \S+ on \S+/\d+ \(lock holder pid \d+\)\. Waiting up to \d+ s",
        second.text,
    ), second.output[-4000:]
    # The lock is released at the end: the owner file its holder watches is gone (the holder
    # then lets go of the flock at its next look).
    owner = interrupted.host.exec(["test", "-e", "/run/lock/sparkops-host.lock.owner"])
    assert owner.returncode != 0
