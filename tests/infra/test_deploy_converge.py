"""The deploy playbook converges against the local inventory (Docker on this machine), and a
second run changes nothing.

The cpu-tiny stack runs in a real container of this machine's Docker engine, with the
rendered compose project. The full vLLM-CPU image (docker/vllm-cpu) is a 3.5 GB install, too
much for the CI budget, so the container is docker/vllm-cpu built with INSTALL_VLLM=0 (the
test bed's Debian base + libnuma/libgomp) and the kit's vLLM-CPU venv (and the interpreter it
links to) mounted read-only through `vllm_serving_extra_volumes`: the same rendered command,
entrypoint and environment. This
machine has no systemd, so the role starts the compose project directly
(`vllm_serving_use_systemd` follows the service manager).
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from sparkops.local import paths
from sparkops.local.model import ensure_tiny_model
from sparkops.local.server import free_ports

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "sparkops/testhost:bookworm-amd64"
RUNTIME_IMAGE = "sparkops/vllm-cpu-runtime:local"


@pytest.fixture(scope="module")
def runtime_image(docker_engine) -> str:
    """docker/vllm-cpu with INSTALL_VLLM=0: Debian + libnuma/libgomp, the venv comes mounted."""
    if subprocess.run(
        ["docker", "image", "inspect", RUNTIME_IMAGE], capture_output=True
    ).returncode:
        build = subprocess.run(
            [
                "docker", "build", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
                "--build-arg", "INSTALL_VLLM=0", "-t", RUNTIME_IMAGE,
                str(REPO / "docker" / "vllm-cpu"),
            ],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return RUNTIME_IMAGE


def _venv_mounts() -> tuple[Path, Path]:
    """The vLLM-CPU venv and the Python installation its interpreter links to."""
    python = paths.vllm_python()
    venv = python.parent.parent
    cfg = dict(
        line.split(" = ", 1)
        for line in (venv / "pyvenv.cfg").read_text().splitlines()
        if " = " in line
    )
    return venv, Path(cfg["home"]).parent


def run_deploy(inventory: Path) -> tuple[subprocess.CompletedProcess, int]:
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i", str(inventory), str(REPO / "ansible" / "playbooks" / "deploy.yml"),
            "-e", "ansible_become=false",  # already root; this machine has no sudo
        ],
        capture_output=True, text=True, timeout=1500, cwd=REPO / "ansible",
        env={"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
             "HOME": str(Path.home()), "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg")},
    )  # fmt: skip
    recap = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", result.stdout)
    return result, int(recap.group(1)) if recap else -1


@pytest.fixture
def local_inventory(tmp_path, runtime_image):
    model = ensure_tiny_model()
    venv, python_home = _venv_mounts()
    port = free_ports(1)
    project = f"sparkops-test-{secrets.token_hex(4)}"
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"all": {"children": {"sparks": {"hosts": {"localhost": host}}}}}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    serving = yaml.safe_load(
        (REPO / "inventory" / "local" / "group_vars" / "all" / "serving.yml").read_text()
    )
    serving.update(
        vllm_serving_image=runtime_image,
        vllm_serving_model_dir=str(model),
        vllm_serving_port=port,
        vllm_serving_project=project,
        vllm_serving_stack_dir=str(tmp_path / "stack"),
        vllm_serving_hf_cache=str(tmp_path / "hf-cache"),
        vllm_serving_extra_volumes=[str(venv), str(python_home)],
        vllm_serving_extra_env={"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin"},
        vllm_serving_ready_timeout=900,
    )
    (inventory / "group_vars" / "all" / "serving.yml").write_text(yaml.safe_dump(serving))
    try:
        yield inventory, port, tmp_path / "stack"
    finally:
        down = ["docker", "compose", "--project-directory", str(tmp_path / "stack"), "down", "-v"]
        subprocess.run(down, capture_output=True, timeout=300, check=False)


@pytest.mark.timeout(2400)  # two converges; the first waits for vLLM-CPU to start
def test_deploy_converges_and_a_second_run_changes_nothing(local_inventory):
    inventory, port, stack = local_inventory
    started = time.monotonic()
    first, first_changed = run_deploy(inventory)
    first_s = time.monotonic() - started
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-2000:]
    assert first_changed >= 4  # folders, compose.yml, serving.env, the stack start
    assert (stack / "serving.env").stat().st_mode & 0o777 == 0o600

    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        assert json.loads(resp.read())["usage"]["completion_tokens"] >= 1
    inspect = subprocess.run(
        ["docker", "compose", "--project-directory", str(stack), "ps", "--format", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "healthy" in inspect.stdout or "running" in inspect.stdout

    started = time.monotonic()
    second, second_changed = run_deploy(inventory)
    second_s = time.monotonic() - started
    assert second.returncode == 0, second.stdout[-5000:]
    assert second_changed == 0, second.stdout[-5000:]
    print(f"\ndeploy local: first converge {first_s:.0f} s, second {second_s:.0f} s")
