"""A container the kit did not create holding a stack container's name is refused before any
change (issue 43 item 8), on a systemd test host.

Someone's `docker run --name sparkops-vllm-1 ...` was kept (good), but the deploy had already
rewritten the stack's files and restarted the unit, and ended in the unit's raw systemd text
("Job for sparkops-serving.service failed"), compose's "Conflict. The container name ... is
already in use" only in the journal. The deploy's preflight now asks Docker for the containers
holding the names compose will give the stack's (PROJECT-SERVICE-1) and refuses one without the
stack's compose project label, naming it, what it runs and what to do.

The test host has no engine of its own: this machine's engine answers it through its socket,
mounted in the host, with this machine's docker CLI copied in, so `docker ps` in the host lists
real containers. The stack's project name is random, so the containers it names are the test's
own: one plain `docker run` (not the kit's), one carrying compose's labels for the project (the
kit's own, as compose labels them). The deploy runs as a play of the role's task files in
tasks/main.yml's order, from the render to the files it writes.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins.hosts import READY_STATES, SYSTEMD_FLAGS, Host, image_ref, inventory, run_docker
from tests.plugins.playbook import PlaybookRun, run_playbook

pytestmark = [pytest.mark.infra, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PLUGINS = {"ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter")}
SOCKET = "/var/run/docker.sock"
STACK_DIR = "/opt/sparkops/serving"
SERVING: dict[str, Any] = {
    "sparkops_topology": "single",
    "vllm_serving_profile": "cpu-tiny",
    "vllm_serving_image": "sparkops/vllm:cpu",
    "vllm_serving_gpus": False,
    "vllm_serving_memory_guard": False,
}


def play(*steps: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "Run the vllm_serving role's steps from its render",
            "hosts": "sparks",
            "gather_subset": ["min"],
            "roles": [{"role": "sparkops_defaults"}],
            "tasks": [
                {
                    "name": f"Run the role's {step}",
                    "ansible.builtin.include_role": {"name": "vllm_serving", "tasks_from": step},
                }
                for step in steps
            ],
        }
    ]


@pytest.fixture(scope="module")
def host_with_engine(docker_engine: str) -> Iterator[Host]:
    """A systemd test host whose `docker` is this machine's engine (socket and CLI)."""
    image = image_ref("amd64")
    name = f"sparkops-test-amd64-engine-{secrets.token_hex(4)}"
    started = run_docker(
        "run", "--detach", f"--name={name}", f"--hostname={name}",
        "--label=org.sparkops.testbed=amd64", *SYSTEMD_FLAGS, f"--volume={SOCKET}:{SOCKET}",
        image, "/sbin/init", check=False,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    host = Host(name=name, id=started.stdout.strip(), arch="amd64")
    try:
        for _ in range(90):
            if host.system_state() in READY_STATES:
                break
            time.sleep(1)
        cli = shutil.which("docker")
        assert cli, "no docker CLI on this machine"
        run_docker("cp", "-L", cli, f"{host.id}:/usr/bin/docker")
        # The preflight asks for compose v2 first: this machine's plugin, where the CLI finds it.
        compose = run_docker("info", "--format", "{{range .ClientInfo.Plugins}}{{if eq .Name "
                             '"compose"}}{{.Path}}{{end}}{{end}}').stdout.strip()  # fmt: skip
        host.exec(["mkdir", "-p", "/usr/libexec/docker/cli-plugins"], check=True)
        run_docker("cp", "-L", compose, f"{host.id}:/usr/libexec/docker/cli-plugins/docker-compose")
        assert host.exec(["docker", "ps", "--quiet", "--filter", f"id={host.id}"]).stdout.strip()
        yield host
    finally:
        run_docker("rm", "--force", "--volumes", host.id, check=False)


@pytest.fixture
def project(tmp_path: Path, host_with_engine: Host) -> Iterator[tuple[str, Path]]:
    """A random compose project name for the stack, and an inventory deploying it; every
    container named after it is removed afterwards."""
    name = f"sparkops-t43-{secrets.token_hex(4)}"
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory([host_with_engine], "sparks")))
    serving = {**SERVING, "vllm_serving_project": name}
    (tmp_path / "group_vars" / "all" / "serving.yml").write_text(yaml.safe_dump(serving))
    try:
        yield name, tmp_path
    finally:
        ids = run_docker("ps", "-aq", "--filter", f"name={name}-").stdout.split()
        if ids:
            run_docker("rm", "--force", *ids, check=False)


def deploy(root: Path, steps: tuple[str, ...], *args: str) -> PlaybookRun:
    (root / "deploy.yml").write_text(yaml.safe_dump(play(*steps), sort_keys=False))
    run = run_playbook(root / "deploy.yml", root / "hosts.yml", *args, env=PLUGINS, timeout=600)
    assert "Traceback" not in run.output
    return run


def container(name: str) -> dict[str, str]:
    fields = "{{.Id}} {{.State.Status}} {{.State.StartedAt}} {{json .Config.Labels}}"
    return {"inspect": run_docker("inspect", "--format", fields, name).stdout.strip()}


@pytest.mark.parametrize("mode", [(), ("--check",)], ids=["run", "check"])
def test_someone_else_s_container_holding_the_name_is_refused_before_any_change(
    host_with_engine: Host, project: tuple[str, Path], mode: tuple[str, ...]
) -> None:
    host = host_with_engine
    name, root = project
    taken = f"{name}-vllm-1"
    run_docker("run", "--detach", f"--name={taken}", image_ref("amd64"), "sleep", "infinity")
    before = container(taken)
    run = deploy(root, ("render.yml", "preflight.yml", "install.yml", "configure.yml"), *mode)
    assert run.rc == 2, run.output[-5000:]
    assert run.recap[host.name].failed == 1 and run.changed_on(host.name) == 0
    assert (
        f"{host.name}: a container the kit did not create holds the name {taken} (image"
        f" {image_ref('amd64')}, up "
    ) in run.text, run.output[-5000:]
    assert (
        "it carries no compose project label), which the serving stack's vllm service needs:"
        " compose cannot start the stack beside it, so nothing was changed and that container"
        f" was left as it is. If it may go, remove it (`docker rm -f {taken}`) or rename it"
        f" (`docker rename {taken} NEW-NAME`); to keep it, give the stack other names with"
        " vllm_serving_project"
    ) in run.text
    assert "Job for sparkops-serving.service failed" not in run.output
    # Nothing of the stack was made, and the container is the same one, still running.
    assert host.exec(["test", "-e", STACK_DIR]).returncode != 0
    assert host.exec(["test", "-e", "/etc/systemd/system/sparkops-serving.service"]).returncode
    assert container(taken) == before and " running " in before["inspect"]


def test_a_container_of_the_stack_s_own_project_passes(project: tuple[str, Path]) -> None:
    """compose labels the containers it creates with their project: the kit's own stack (one
    made by an earlier deploy) holds the name rightly."""
    name, root = project
    labels = [
        f"--label=com.docker.compose.project={name}",
        "--label=com.docker.compose.service=vllm",
    ]
    run_docker(
        "run", "--detach", f"--name={name}-vllm-1", *labels, image_ref("amd64"), "sleep",
        "infinity",
    )  # fmt: skip
    run = deploy(root, ("render.yml", "container_names.yml"))
    assert run.rc == 0, run.output[-5000:]
    assert "a container the kit did not create holds the name" not in run.output
    assert run.recap[next(iter(run.recap))].failed == 0
