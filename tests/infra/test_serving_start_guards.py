"""A deploy never leaves a host worse than it found it (issue 43 item 2), on a systemd test host.

1. A model folder with config.json and every weight but no tokenizer passed the model check,
   and the deploy replaced a healthy stack with one vLLM could not start. Now everything vLLM
   reads from the folder at start is checked first (tasks/model_check.yml): refused, nothing
   written, the stack not restarted.
2. A new stack that does not come up (here: its vLLM exits at start) left the host with no
   stack serving. Now the deploy puts the previous files back, starts the previous stack and
   stops with one line naming why (tasks/service.yml's rescue, tasks/rollback.yml); a deploy
   that comes up removes the copies it kept.

What serves here stands in for the stack (no Docker engine, no vLLM in the host), as in
test_serving_restart_guards.py: the deploy's own unit, written by the role from a real render,
with a drop-in that runs a small HTTP server in its place. The server reads the stack's
compose.yml as vLLM reads its settings: it answers /health, /v1/models and a chat completion,
says which generation of the settings it started from (SPARKOPS_TEST_GENERATION, set through
vllm_serving_extra_env) and exits at once, as a vLLM that cannot start does, when the settings
hold SPARKOPS_STANDIN_CRASH. The deploy runs as a play of the role's task files in
tasks/main.yml's order from the render on; its start is tasks/service.yml itself, read and
replayed task for task, leaving out only drift.yml (it asks a Docker engine's compose).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.plugins.hosts import Host, inventory
from tests.plugins.playbook import PlaybookRun, run_playbook

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "ansible" / "roles" / "vllm_serving" / "tasks"
PLUGINS = {"ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter")}
UNIT = "sparkops-serving.service"
STACK_DIR = "/opt/sparkops/serving"
RECORD = "/etc/sparkops/stack-record.json"
STANDIN = "/srv/sparkops-standin/serve.py"
MODEL = "/srv/model"
NO_TOKENIZER = "/srv/model-without-tokenizer"
SERVING: dict[str, Any] = {
    "sparkops_topology": "single",
    "vllm_serving_profile": "cpu-tiny",
    "vllm_serving_image": "sparkops/vllm:cpu",
    "vllm_serving_gpus": False,
    "vllm_serving_model_dir": MODEL,
    "vllm_serving_memory_guard": False,
    # The stand-in answers within a second; one that exits is given up on after this.
    "vllm_serving_ready_timeout": 20,
}
STANDIN_SERVER = f"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

compose = open("{STACK_DIR}/compose.yml").read()
if "SPARKOPS_STANDIN_CRASH" in compose:
    sys.exit("stand-in vLLM: cannot start with these settings")
generation = "none"
for line in compose.splitlines():
    if "SPARKOPS_TEST_GENERATION:" in line:
        generation = line.split(":", 1)[1].strip().strip('"')


class Handler(BaseHTTPRequestHandler):
    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.answer({{"data": [{{"id": "tiny"}}]}})
        return self.answer({{"generation": generation}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer({{"choices": [{{"message": {{"content": "yes, generation " + generation}}}}]}})


HTTPServer(("127.0.0.1", 8000), Handler).serve_forever()
"""
STANDIN_DROP_IN = f"""[Service]
Type=simple
RemainAfterExit=no
ExecStartPre=
ExecStart=
ExecStart=/usr/bin/python3 {STANDIN}
ExecStop=
"""
DOCKER_UNIT_STANDIN = """[Unit]
Description=stand-in for docker.service (no engine: tests/infra/test_serving_start_guards.py)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
"""
# One safetensors tensor of 4 float32 zeros: a whole weight file for the weight check.
SAFETENSORS = (
    "import json, struct, sys\n"
    "h = json.dumps({'w': {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 16]}}).encode()\n"
    "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + bytes(16))\n"
)
# Where the copy module keeps the files a deploy replaced (FILE.PID.DATE~).
BACKUPS = f"ls -a {STACK_DIR} /etc/systemd/system /etc/sparkops | grep '~$' || true"


def included(step: str) -> dict[str, Any]:
    return {"name": f"Run the role's {step}", "ansible.builtin.include_role": {
        "name": "vllm_serving", "tasks_from": step}}  # fmt: skip


def replayed(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """service.yml's tasks as a play's: each import_tasks of the role an include_role of the same
    file, blocks and rescues kept; drift.yml left out (it needs a Docker engine's compose)."""
    steps = []
    for task in tasks:
        if "block" in task:
            steps.append({**task, "block": replayed(task["block"]),
                          "rescue": replayed(task.get("rescue", []))})  # fmt: skip
        elif "ansible.builtin.import_tasks" in task:
            if task["ansible.builtin.import_tasks"] != "drift.yml":
                steps.append(included(task["ansible.builtin.import_tasks"]))
        else:
            steps.append(task)
    return steps


def deploy_play() -> list[dict[str, Any]]:
    service = yaml.safe_load((TASKS / "service.yml").read_text())
    steps = ["render.yml", "model_check.yml", "restart_guard.yml", "install.yml", "configure.yml"]
    return [
        {
            "name": "Run the vllm_serving role's steps from its render to its start",
            "hosts": "sparks",
            "gather_subset": ["min"],
            "roles": [{"role": "sparkops_defaults"}],
            "tasks": [included(step) for step in steps] + replayed(service),
        }
    ]


@dataclass
class Stack:
    host: Host
    root: Path

    def deploy(self, **changes: Any) -> PlaybookRun:
        (self.root / "group_vars" / "all" / "serving.yml").write_text(
            yaml.safe_dump({**SERVING, **changes})
        )
        run = run_playbook(
            self.root / "deploy.yml", self.root / "hosts.yml", env=PLUGINS, timeout=600
        )
        assert "Traceback" not in run.output
        return run

    def files(self) -> dict[str, str]:
        """The stack's files a deploy writes, as they are on the host."""
        paths = [f"{STACK_DIR}/compose.yml", f"{STACK_DIR}/serving.env", RECORD]
        return {p: self.host.exec(["cat", p], check=True).stdout for p in paths}

    def main_pid(self) -> str:
        show = ["systemctl", "show", "--property=MainPID", "--value", UNIT]
        return self.host.exec(show).stdout.strip()

    def serving(self) -> str:
        """The generation of the settings the stand-in serves ("" when nothing answers)."""
        probe = (
            "import json, urllib.request as u\n"
            "try:\n print(json.load(u.urlopen('http://127.0.0.1:8000/health', timeout=10))"
            "['generation'])\nexcept OSError:\n print('')\n"
        )
        return self.host.exec(["python3", "-c", probe]).stdout.strip()

    def wait_serving(self, generation: str) -> None:
        for _ in range(60):
            if self.serving() == generation:
                return
            time.sleep(1)
        pytest.fail(f"the stand-in never served generation {generation}: {self.serving()!r}")


def one_line_with(run: PlaybookRun, *words: str) -> str:
    lines = [line for line in run.output.splitlines() if all(w in line for w in words)]
    assert lines, run.output[-5000:]
    return lines[0]


@pytest.fixture(scope="module")
def stack(systemd_host, tmp_path_factory) -> Stack:
    host: Host = systemd_host("amd64")
    host.exec(["mkdir", "-p", "/srv/sparkops-standin", MODEL, NO_TOKENIZER], check=True)
    host.exec(["sh", "-c", f"cat > {STANDIN}"], input=STANDIN_SERVER, check=True)
    host.exec(["sh", "-c", "cat > /etc/systemd/system/docker.service"], input=DOCKER_UNIT_STANDIN)
    host.exec(f"mkdir -p /etc/systemd/system/{UNIT}.d", check=True)
    host.exec(
        ["sh", "-c", f"cat > /etc/systemd/system/{UNIT}.d/standin.conf"], input=STANDIN_DROP_IN
    )
    config = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    tokenizer = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}})
    for folder in (MODEL, NO_TOKENIZER):
        host.exec(["sh", "-c", f"cat > {folder}/config.json"], input=config, check=True)
        host.exec(["python3", "-c", SAFETENSORS, f"{folder}/model.safetensors"], check=True)
        host.exec(["sh", "-c", f"cat > {folder}/tokenizer_config.json"], input="{}", check=True)
    host.exec(["sh", "-c", f"cat > {MODEL}/tokenizer.json"], input=tokenizer, check=True)
    root = tmp_path_factory.mktemp("start-guards")
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(inventory([host], group="sparks")))
    (root / "deploy.yml").write_text(yaml.safe_dump(deploy_play(), sort_keys=False))
    deployed = Stack(host, root)
    first = deployed.deploy(vllm_serving_extra_env={"SPARKOPS_TEST_GENERATION": "1"})
    assert first.rc == 0, first.output[-5000:]
    assert "vLLM answered /health after" in first.text
    deployed.wait_serving("1")
    return deployed


def test_a_model_folder_without_a_tokenizer_is_refused_before_any_change(stack: Stack) -> None:
    host = stack.host
    before, pid = stack.files(), stack.main_pid()
    run = stack.deploy(
        vllm_serving_model_dir=NO_TOKENIZER,
        vllm_serving_extra_env={"SPARKOPS_TEST_GENERATION": "2"},
    )
    assert run.rc == 2, run.output[-5000:]
    assert run.recap[host.name].failed == 1 and run.changed_on(host.name) == 0
    line = one_line_with(
        run,
        f"The model folder {NO_TOKENIZER} on {host.name} cannot be served: it has no tokenizer"
        " (none of tokenizer.json, tokenizer.model, vocab.json with merges.txt, tekken.json,"
        " vocab.txt), and the profile names none (vLLM's --tokenizer in vllm.extra_args).",
    )
    assert "nothing was changed and the running stack keeps serving" in line
    assert "TASK [vllm_serving : Write the rendered compose project files]" not in run.output
    # The host holds what it held, and the same stand-in serves the same settings.
    assert stack.files() == before
    assert stack.main_pid() == pid and stack.serving() == "1"


def test_a_new_stack_that_does_not_come_up_puts_the_previous_one_back(stack: Stack) -> None:
    host = stack.host
    stack.wait_serving("1")
    before, pid = stack.files(), stack.main_pid()
    run = stack.deploy(
        vllm_serving_extra_env={"SPARKOPS_TEST_GENERATION": "3", "SPARKOPS_STANDIN_CRASH": "1"}
    )
    assert run.rc == 2, run.output[-5000:]
    assert run.recap[host.name].rescued == 1
    line = one_line_with(
        run,
        f"{host.name}: the new serving stack did not come up (Wait for vLLM's /health, then"
        " require text back from one real chat completion: vLLM at http://127.0.0.1:8000: not"
        " ready after",
        f"so the previous one was put back ({STACK_DIR}/compose.yml, {STACK_DIR}/stack-record.json,"
        f" {RECORD}) and serves again. Nothing of this deploy is in force.",
        "then run deploy.yml again.",
    )
    assert "Log tail" not in line
    # The previous files, started again (a new process) and serving the previous settings.
    assert stack.files() == before
    assert host.exec(["systemctl", "is-active", UNIT]).stdout.strip() == "active"
    assert stack.main_pid() != pid and stack.serving() == "1"
    assert host.exec(BACKUPS).stdout == ""  # the copies put back are gone


def test_a_stack_that_comes_up_keeps_no_copies_and_a_second_deploy_changes_nothing(
    stack: Stack,
) -> None:
    changed = {"vllm_serving_extra_env": {"SPARKOPS_TEST_GENERATION": "4"}}
    run = stack.deploy(**changed)
    assert run.rc == 0, run.output[-5000:]
    stack.wait_serving("4")
    assert (
        "TASK [vllm_serving : Remove the previous stack's files kept for a rollback]" in run.output
    )
    assert stack.host.exec(BACKUPS).stdout == ""
    again = stack.deploy(**changed)
    assert again.rc == 0 and again.changed_on(stack.host.name) == 0, again.output[-5000:]


def test_the_start_puts_the_previous_stack_back_whatever_step_fails() -> None:
    """The replay above leaves out drift.yml only; in the role it runs inside the same block,
    and the model check runs in the preflight, before any write (tasks/main.yml's order)."""
    (block,) = [t for t in yaml.safe_load((TASKS / "service.yml").read_text()) if "block" in t]
    imported = [t.get("ansible.builtin.import_tasks") for t in block["block"]]
    assert imported == [None, "start.yml", "drift.yml", "ready.yml"]
    assert block["block"][0]["ansible.builtin.meta"] == "flush_handlers"
    assert [t["ansible.builtin.import_tasks"] for t in block["rescue"]] == ["rollback.yml"]
    preflight = yaml.safe_load((TASKS / "preflight.yml").read_text())
    assert "model_check.yml" in [t.get("ansible.builtin.import_tasks") for t in preflight]
    main = [
        t["ansible.builtin.import_tasks"] for t in yaml.safe_load((TASKS / "main.yml").read_text())
    ]
    assert main.index("preflight.yml") < main.index("configure.yml") < main.index("service.yml")
