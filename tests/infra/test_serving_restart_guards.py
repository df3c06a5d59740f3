"""No restart of the serving stack under a running batch job unless asked, and a restart that
ends with the stack serving (issue 37 item 12, issue 43 item 3), on a systemd test host.

What serves here stands in for the stack (this host has no Docker engine, no vLLM): the
deploy's own files and unit, written by the vllm_serving role's install and configure steps
from a real render, with a drop-in that makes the unit run a small HTTP server answering
/health on vLLM's port instead of `docker compose up` (and a oneshot docker.service meeting
the unit's Requires=). restart.yml stops, starts and waits on it as on a Spark. The deploy's
part runs as a play of the role's own task files in deploy.yml's order (the job guard, install,
configure, the restart handler): the whole deploy.yml needs Docker and vLLM in the host. A
batch job is a transient unit started the way batch.yml starts one
(`systemd-run --unit=sparkops-batch-NAME`).

The test host's /proc/sys is read-only, as in any container: issue 43 item 3's host as it is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import Host, inventory
from tests.plugins.playbook import PlaybookRun, run_playbook

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
# The kit's filters, which a playbook beside ansible/playbooks/ finds through its link there.
PLUGINS = {"ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter")}
UNIT = "sparkops-serving.service"
STACK_DIR = "/opt/sparkops/serving"
STANDIN_DIR = "/srv/sparkops-standin"
# The stack as the deploy renders it, for a CPU profile: nothing of it is pulled or run here.
SERVING = {
    "sparkops_topology": "single",
    "vllm_serving_profile": "cpu-tiny",
    "vllm_serving_image": "sparkops/vllm:cpu",
    "vllm_serving_gpus": False,
    "vllm_serving_model_dir": "/srv/model",
    "vllm_serving_memory_guard": False,
}
# The unit keeps the deploy's own [Unit] and file; only what it runs is the stand-in's.
STANDIN_DROP_IN = f"""[Service]
Type=simple
RemainAfterExit=no
ExecStartPre=
ExecStart=
ExecStart=/usr/bin/python3 -m http.server 8000 --bind 127.0.0.1 --directory {STANDIN_DIR}
ExecStop=
"""
DOCKER_UNIT_STANDIN = """[Unit]
Description=stand-in for docker.service (no engine: tests/infra/test_serving_restart_guards.py)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
"""
# deploy.yml's vllm_serving steps from the job guard on (tasks/main.yml's order), each a task
# file of the role: render, refuse under running jobs, make the folders, write the files, and
# the restart a changed file notifies.
DEPLOY_PLAY = [
    {
        "name": "Run the vllm_serving role's steps from its job guard to the restart",
        "hosts": "sparks",
        "gather_subset": ["min"],
        "roles": [{"role": "sparkops_defaults"}],
        "tasks": [
            {
                "name": f"Run the role's {step}",
                "ansible.builtin.include_role": {"name": "vllm_serving", "tasks_from": step},
            }
            for step in ("render.yml", "restart_guard.yml", "install.yml", "configure.yml")
        ]
        + [
            {
                "name": "Restart the stack where a file changed, as service.yml does first",
                "ansible.builtin.meta": "flush_handlers",
            }
        ],
    }
]


@dataclass
class Deployed:
    """The test host with the stand-in stack deployed, and the inventory that deployed it."""

    host: Host
    inventory: Path
    play: Path

    def set_serving(self, **changes: object) -> None:
        """Rewrite the inventory's serving settings: SERVING with ``changes``."""
        path = self.inventory / "group_vars" / "all" / "serving.yml"
        path.write_text(yaml.safe_dump({**SERVING, **changes}))

    def deploy(self, *args: str) -> PlaybookRun:
        run = run_playbook(self.play, self.inventory / "hosts.yml", *args, env=PLUGINS, timeout=600)
        assert "Traceback" not in run.output
        return run

    def restart(self, **extra_vars: object) -> PlaybookRun:
        run = run_playbook(
            "restart.yml", self.inventory / "hosts.yml", extra_vars=extra_vars, timeout=600
        )
        assert "Traceback" not in run.output
        return run


def main_pid(host: Host) -> str:
    """The stand-in server's pid: another one means the stack was restarted."""
    return host.exec(["systemctl", "show", "--property=MainPID", "--value", UNIT]).stdout.strip()


def health(host: Host) -> int:
    """The status /health answers on vLLM's port in the host (-1: nothing answers)."""
    probe = (
        "import urllib.request as u\n"
        "try:\n print(u.urlopen('http://127.0.0.1:8000/health', timeout=10).status)\n"
        "except OSError:\n print(-1)\n"
    )
    return int(host.exec(["python3", "-c", probe]).stdout.strip() or -1)


def wait_serving(host: Host, tries: int = 60) -> None:
    for _ in range(tries):
        if health(host) == 200:
            return
        time.sleep(1)
    pytest.fail(f"the stand-in stack never answered /health: {main_pid(host)!r}")


@contextmanager
def batch_job(host: Host, name: str) -> Iterator[str]:
    """A running batch job's unit, started as batch.yml starts one, stopped afterwards."""
    unit = f"sparkops-batch-{name}"
    host.exec(
        ["systemd-run", f"--unit={unit}", "--property=Restart=no", "sleep", "3600"], check=True
    )
    try:
        assert host.exec(["systemctl", "is-active", f"{unit}.service"]).stdout.strip() == "active"
        yield unit
    finally:
        host.exec(["systemctl", "stop", f"{unit}.service"])


def one_line_with(run: PlaybookRun, *words: str) -> str:
    """The one output line holding every word (the refusal is one line, not a paragraph)."""
    lines = [line for line in run.output.splitlines() if all(w in line for w in words)]
    assert lines, run.output[-4000:]
    return lines[0]


@pytest.fixture(scope="module")
def deployed(systemd_host, tmp_path_factory) -> Deployed:
    host: Host = systemd_host("amd64")
    host.exec(f"mkdir -p {STANDIN_DIR} && echo ok > {STANDIN_DIR}/health", check=True)
    host.exec(["sh", "-c", "cat > /etc/systemd/system/docker.service"], input=DOCKER_UNIT_STANDIN)
    host.exec(f"mkdir -p /etc/systemd/system/{UNIT}.d", check=True)
    host.exec(
        ["sh", "-c", f"cat > /etc/systemd/system/{UNIT}.d/standin.conf"], input=STANDIN_DROP_IN
    )
    root = tmp_path_factory.mktemp("restart-guards")
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory([host], group="sparks")))
    play = root / "deploy-steps.yml"
    play.write_text(yaml.safe_dump(DEPLOY_PLAY, sort_keys=False))
    stack = Deployed(host, root, play)
    stack.set_serving()
    first = stack.deploy()
    assert first.rc == 0, first.output[-4000:]
    assert first.changed_on(host.name) >= 3  # folders, compose.yml, serving.env, the unit
    wait_serving(host)
    return stack


def test_the_deploy_restarts_the_stack_under_running_jobs_only_when_asked(
    deployed: Deployed,
) -> None:
    host = deployed.host
    compose = f"{STACK_DIR}/compose.yml"
    with batch_job(host, "triage"):
        # A deploy that changes nothing restarts nothing, so it is never refused.
        pid = main_pid(host)
        same = deployed.deploy()
        assert same.rc == 0, same.output[-4000:]
        assert same.changed_on(host.name) == 0, same.output[-4000:]
        assert main_pid(host) == pid

        # A changed setting would rewrite compose.yml and restart the stack: refused before any
        # file is written, naming the job and the variable in one line (check mode alike).
        deployed.set_serving(vllm_serving_extra_env={"SPARKOPS_TEST_GENERATION": "2"})
        before = host.exec(["cat", compose], check=True).stdout
        for mode in ((), ("--check",)):
            refused = deployed.deploy(*mode)
            assert refused.rc == 2, refused.output[-4000:]
            assert refused.recap[host.name].failed == 1
            assert refused.changed_on(host.name) == 0
            line = one_line_with(
                refused,
                f"{host.name}: this deploy rewrites compose.yml",
                f"sparkops batch jobs are running (sparkops-batch-triage on {host.name})",
                "-e vllm_serving_restart_running_jobs=true",
            )
            assert "The serving stack was left as it is" in line
            assert "TASK [vllm_serving : Write the rendered compose project files]" not in (
                refused.output
            )
        assert host.exec(["cat", compose], check=True).stdout == before
        assert main_pid(host) == pid and health(host) == 200

        # Asked to go ahead: the files are written, the stack restarted, and the run says so.
        asked = deployed.deploy("-e", "vllm_serving_restart_running_jobs=true")
        assert asked.rc == 0, asked.output[-4000:]
        assert (
            f"{host.name}: this deploy rewrites compose.yml" in asked.text
            and "which restarts the serving stack under the running sparkops batch jobs "
            f"sparkops-batch-triage on {host.name}, as vllm_serving_restart_running_jobs asks"
            in asked.text
        ), asked.output[-4000:]
        assert "SPARKOPS_TEST_GENERATION" in host.exec(["cat", compose], check=True).stdout
        assert main_pid(host) != pid
        wait_serving(host)
        # The job itself is left alone.
        job = host.exec(["systemctl", "is-active", "sparkops-batch-triage.service"])
        assert job.stdout.strip() == "active"

    # No job running: a changed setting restarts the stack without a word about jobs.
    pid = main_pid(host)
    deployed.set_serving()
    free = deployed.deploy()
    assert free.rc == 0, free.output[-4000:]
    assert "batch jobs are running" not in free.text and "under the running" not in free.text
    assert "SPARKOPS_TEST_GENERATION" not in host.exec(["cat", compose], check=True).stdout
    assert main_pid(host) != pid
    wait_serving(host)


def test_restart_refuses_under_a_running_job_unless_asked(deployed: Deployed) -> None:
    host = deployed.host
    wait_serving(host)
    pid = main_pid(host)
    with batch_job(host, "triage"):
        refused = deployed.restart(sparkops_restart_drop_caches=False)
        assert refused.rc == 2, refused.output[-4000:]
        assert refused.changed_on(host.name) == 0
        one_line_with(
            refused,
            f"{host.name}: restart.yml restarts the serving stack",
            f"(sparkops-batch-triage on {host.name})",
            "-e vllm_serving_restart_running_jobs=true",
        )
        assert "TASK [Stop the serving stack]" not in refused.output
        assert main_pid(host) == pid and health(host) == 200

        asked = deployed.restart(
            sparkops_restart_drop_caches=False, vllm_serving_restart_running_jobs=True
        )
        assert asked.rc == 0, asked.output[-4000:]
        assert (
            "restart.yml restarts the serving stack under the running sparkops batch jobs "
            f"sparkops-batch-triage on {host.name}" in asked.text
        )
        assert main_pid(host) != pid and health(host) == 200


def test_restart_where_the_page_cache_cannot_be_dropped_stops_before_the_stack_stops(
    deployed: Deployed,
) -> None:
    """Issue 43 item 3: here the drop failed with the shell's `cannot create
    /proc/sys/vm/drop_caches` after the stack was stopped, and the stack stayed down."""
    host = deployed.host
    assert host.exec(["test", "-w", "/proc/sys/vm/drop_caches"]).returncode != 0  # a container
    wait_serving(host)
    pid = main_pid(host)
    refused = deployed.restart()
    assert refused.rc == 2, refused.output[-4000:]
    assert refused.changed_on(host.name) == 0
    line = one_line_with(
        refused,
        f"{host.name}: /proc/sys/vm/drop_caches is read-only here",
        "no serving stack was stopped",
        "-e sparkops_restart_drop_caches=false",
    )
    assert "cannot create" not in refused.output, line
    assert main_pid(host) == pid and health(host) == 200

    # A misspelt setting would have been ignored: it is refused, naming the declared one.
    misspelt = deployed.restart(sparkops_restart_drop_cache=False)
    assert misspelt.rc == 2, misspelt.output[-4000:]
    assert (
        "sparkops_restart_drop_cache is not a variable of restart.yml (did you mean "
        "sparkops_restart_drop_caches?)" in misspelt.text
    )
    assert main_pid(host) == pid


def test_a_step_failing_between_the_stop_and_the_start_leaves_the_stack_serving(
    deployed: Deployed,
) -> None:
    """A drop that fails after the stop (here /dev/full is bound over /proc/sys/vm/drop_caches:
    writable to `test -w`, every write failing): the stack is started again and serves, and the
    play fails with the kit's line naming the step and the fix."""
    host = deployed.host
    wait_serving(host)
    pid = main_pid(host)
    host.exec("mount --bind /dev/full /proc/sys/vm/drop_caches", check=True)
    try:
        assert host.exec(["test", "-w", "/proc/sys/vm/drop_caches"]).returncode == 0
        failed = deployed.restart()
    finally:
        host.exec("umount /proc/sys/vm/drop_caches")
    assert failed.rc == 2, failed.output[-4000:]
    assert failed.recap[host.name].rescued == 1
    line = one_line_with(
        failed,
        f"{host.name}: the serving stack was stopped and started again, and serves, but a step in"
        " between failed (Drop the page cache so vLLM sees the memory as free:",
        "-e sparkops_restart_drop_caches=false",
    )
    # The failing write's own words are kept in the line (the errno is the kernel's to choose).
    assert re.search(r"/bin/sh: \d+: echo: .+\)\. Run restart\.yml", line), line
    assert host.exec(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    assert main_pid(host) != pid and health(host) == 200


def test_the_deploy_asks_about_jobs_before_its_first_write() -> None:
    """deploy.yml runs the role's tasks/main.yml: the guard comes before the folders and files
    (the play above runs those steps; this holds the real order to them)."""
    steps = yaml.safe_load(
        (REPO / "ansible" / "roles" / "vllm_serving" / "tasks" / "main.yml").read_text()
    )
    files = [step.get("ansible.builtin.import_tasks") for step in steps]
    assert (
        files.index("restart_guard.yml") < files.index("install.yml") < files.index("configure.yml")
    )
