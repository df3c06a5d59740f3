"""The deploy playbook converges against the local inventory (Docker on this machine), and a
second run changes nothing.

The cpu-tiny stack runs in a real container of this machine's Docker engine, with the
rendered compose project. The full vLLM-CPU image (docker/vllm-cpu) is a 3.5 GB install, too
much for the CI budget, so the container is docker/vllm-cpu built with INSTALL_VLLM=0 (the
test bed's Debian base + libnuma/libgomp) and the kit's vLLM-CPU venv (and the interpreter it
links to) mounted read-only through `vllm_serving_extra_volumes`: the same rendered command,
entrypoint and environment. This machine has no systemd, so the role starts the compose
project directly (`vllm_serving_use_systemd` follows the service manager).

Start-up in the container is CPU-bound (three processes each import torch/vLLM, about 12 s
each on an idle core, the same as outside Docker): about 1 min when the 2 cores are free, and
far longer when other jobs load them, hence the generous timeouts.

This is a real user's single-node deploy, for real, in a container: the same playbook, role,
rendered compose project and health wait; only the image is the CPU stand-in and the host is
this machine instead of a Spark.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from sparkops.local.model import ensure_tiny_model
from sparkops.local.server import free_ports
from sparkops.render import envfile
from tests.plugins.hosts import run_docker
from tests.plugins.inventories import local_serving_inventory
from tests.plugins.playbook import PlaybookRun, run_playbook, start_playbook
from tests.plugins.vllm_server import mounted_venv_vars

pytestmark = [pytest.mark.long, pytest.mark.infra]

REPO = Path(__file__).resolve().parents[2]
HEALTHY_TIMEOUT_S = 300  # Docker's own health check runs every 30 s after a 120 s start period
# Secrets the deploy writes to serving.env (0600) only: never in the readable stack record.
# The key holds what compose's env-file parsing once rewrote (`$HOME` became /root, so every
# client got 401: issue 34 item 4): quotes, a backtick, `$`, `%`, `\`, `#` and a space.
API_KEY = f"sk-deploy-{secrets.token_hex(8)}$HOME'\"`%\\# x"
HF_TOKEN = f"hf_{secrets.token_hex(8)}"


def run_deploy(inventory: Path) -> tuple[PlaybookRun, int]:
    """deploy.yml from ansible/, with nothing of this process's environment but PATH and HOME."""
    run = run_playbook(
        "deploy.yml",
        inventory,
        "-e",
        "ansible_become=false",  # already root; this machine has no sudo
        inherit_env=False,
        cwd=REPO / "ansible",
        timeout=1500,
    )
    return run, run.changed_on("localhost")


@pytest.fixture
def local_stack(tmp_path, vllm_cpu_runtime_image):
    """Factory: ``local_stack(name, **serving_overrides) -> (inventory, port, stack dir)``, an
    inventory of this machine serving cpu-tiny in a container; every stack is taken down after
    the test."""
    stacks: list[Path] = []

    def make(name: str = "main", **overrides):
        root = tmp_path / name
        port = free_ports(1)
        serving: dict[str, object] = dict(
            vllm_serving_image=vllm_cpu_runtime_image,
            vllm_serving_model_dir=str(ensure_tiny_model()),
            vllm_serving_port=port,
            vllm_serving_project=f"sparkops-test-{secrets.token_hex(4)}",
            vllm_serving_stack_dir=str(root / "stack"),
            vllm_serving_stack_record=str(root / "etc" / "stack-record.json"),
            vllm_serving_api_key=API_KEY,
            vllm_serving_hf_token=HF_TOKEN,
            vllm_serving_hf_cache=str(root / "hf-cache"),
            **mounted_venv_vars(),
            vllm_serving_ready_timeout=900,
        )
        serving.update(overrides)  # a test's own settings win
        inventory = local_serving_inventory(root / "inventory", **serving)
        stacks.append(root / "stack")
        return inventory, port, root / "stack"

    try:
        yield make
    finally:
        for stack in stacks:
            down = ["docker", "compose", "--project-directory", str(stack), "down", "-v"]
            subprocess.run(down, capture_output=True, timeout=300, check=False)


@pytest.fixture
def local_inventory(local_stack):
    """The main stack serves a hub model already complete in its cache (as an earlier deploy's
    fetch leaves it), so the one converge also proves the offline start: no local folder,
    nothing fetched, HF_HUB_OFFLINE=1."""
    inventory, port, stack = local_stack(vllm_serving_model_dir="")
    _hub_cache_with(ensure_tiny_model(), stack.parent / "hf-cache", "tiny")
    return inventory, port, stack


@pytest.mark.timeout(2400)  # two converges; the first waits for vLLM-CPU to start
def test_deploy_converges_and_a_second_run_changes_nothing(local_inventory):
    inventory, port, stack = local_inventory
    started = time.monotonic()
    first, first_changed = run_deploy(inventory)
    first_s = time.monotonic() - started
    ready_at = datetime.now(UTC)  # the playbook's /health wait has passed by now
    assert first.rc == 0, first.stdout[-5000:] + first.stderr[-2000:]
    assert first_changed >= 4  # folders, compose.yml, serving.env, the stack start
    assert (stack / "serving.env").stat().st_mode & 0o777 == 0o600
    # The deploy ended on a real chat completion through the served name, with the stack's key.
    assert (
        "vLLM answered /health after" in first.text and "a chat completion for tiny" in first.text
    )
    assert API_KEY not in first.output and HF_TOKEN not in first.output
    # The model was complete in the cache: nothing fetched, and vLLM starts offline.
    assert "Ask whether the model is complete in the cache" in first.text
    assert not re.search(r"tiny: \d+\.\d\d GB", first.text)
    compose = yaml.safe_load((stack / "compose.yml").read_text())
    assert compose["services"]["vllm"]["environment"]["HF_HUB_OFFLINE"] == "1"
    _preflight_right_after_the_deploy_authenticates_and_accepts_a_starting_container(inventory)

    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        assert json.loads(resp.read())["usage"]["completion_tokens"] >= 1
    _a_job_keeps_the_deployed_stack_record(stack, port, stack.parent)
    # The container's own health check (the compose file's, run by Docker) turns healthy too.
    container = run_docker("compose", "--project-directory", str(stack), "ps", "-q", "vllm")
    container_id = container.stdout.strip()
    assert container_id, container.stderr
    # vLLM runs with the key exactly as given (compose interpolated `$HOME` in it once).
    environ = json.loads(
        run_docker("inspect", "--format", "{{json .Config.Env}}", container_id).stdout
    )
    assert f"VLLM_API_KEY={API_KEY}" in environ
    health = _wait_healthy(container_id)
    assert health["Status"] == "healthy", json.dumps(health)[-3000:]
    state = json.loads(run_docker("inspect", "--format", "{{json .State}}", container_id).stdout)
    ready_s = _seconds_between(state["StartedAt"], ready_at.isoformat())
    healthy_s = _seconds_between(state["StartedAt"], health["Log"][-1]["End"])

    started = time.monotonic()
    second, second_changed = run_deploy(inventory)
    second_s = time.monotonic() - started
    assert second.rc == 0, second.stdout[-5000:]
    assert second_changed == 0, second.stdout[-5000:]
    # Nothing was recreated: the same container still serves.
    again = run_docker("compose", "--project-directory", str(stack), "ps", "-q", "vllm")
    assert again.stdout.strip() == container_id
    _a_model_folder_without_weights_is_refused_with_the_stack_untouched(
        inventory, stack, container_id
    )
    _a_deploy_killed_after_writing_the_files_is_finished_by_the_next(inventory, stack, port)
    print(
        f"\ndeploy local: first converge {first_s:.0f} s (changed={first_changed}); "
        f"/health answered <= {ready_s:.0f} s and Docker's health check read healthy "
        f"{healthy_s:.0f} s after the container started; second converge {second_s:.0f} s "
        f"(changed={second_changed})"
    )


def _serving_vars(inventory: Path) -> Path:
    return inventory / "group_vars" / "all" / "serving.yml"


def _started_at(container_id: str) -> str:
    return run_docker("inspect", "--format", "{{.State.StartedAt}}", container_id).stdout.strip()


def _a_model_folder_without_weights_is_refused_with_the_stack_untouched(
    inventory: Path, stack: Path, container_id: str
) -> None:
    """Issue 34 item 3: a folder with config.json and the tokenizer but no weights (a copy
    that carried only the small files) once passed the check, and the deploy replaced the
    healthy stack with one that crash-looped. It is refused before any change."""
    weightless = inventory.parent / "weightless"
    shutil.copytree(ensure_tiny_model(), weightless, ignore=shutil.ignore_patterns("*.safetensors"))
    original = _serving_vars(inventory).read_text()
    compose_before = (stack / "compose.yml").read_bytes()
    started = _started_at(container_id)
    serving = yaml.safe_load(original)
    serving["vllm_serving_model_dir"] = str(weightless)
    _serving_vars(inventory).write_text(yaml.safe_dump(serving))
    try:
        run, changed = run_deploy(inventory)
    finally:
        _serving_vars(inventory).write_text(original)
    assert run.rc != 0 and changed == 0, run.stdout[-4000:]
    assert (
        f"The model folder {weightless} on localhost cannot be served: it has no weights"
        in run.text
    ), run.stdout[-4000:]
    assert "the running stack keeps serving" in run.text and "cp -rL" in run.text
    assert "Traceback" not in run.output
    # The host holds what it held: the same compose file, the same container, not restarted.
    assert (stack / "compose.yml").read_bytes() == compose_before
    ps = run_docker("compose", "--project-directory", str(stack), "ps", "-q", "vllm")
    assert ps.stdout.strip() == container_id and _started_at(container_id) == started


def _a_deploy_killed_after_writing_the_files_is_finished_by_the_next(
    inventory: Path, stack: Path, port: int
) -> None:
    """Issue 34 item 2: a deploy killed right after it wrote the compose project (a dropped
    ssh session) leaves the files new and the container old; the next deploy writes nothing,
    and must still leave the running container matching what it rendered."""
    original = _serving_vars(inventory).read_text()
    serving = yaml.safe_load(original)
    serving["vllm_serving_extra_env"] = {
        **(serving.get("vllm_serving_extra_env") or {}),
        "SPARKOPS_TEST_GENERATION": "2",
    }
    _serving_vars(inventory).write_text(yaml.safe_dump(serving))
    old_id = run_docker("compose", "--project-directory", str(stack), "ps", "-q", "vllm").stdout
    # Shown once every rendered file is written (the task before has no notice of its own).
    marker = "TASK [vllm_serving : Create the folder of the stack record's readable copy]"
    lines: list[str] = []
    with start_playbook(
        "deploy.yml", inventory, "-e", "ansible_become=false", inherit_env=False,
        cwd=REPO / "ansible", new_session=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=300)
    assert marker in "".join(lines), "".join(lines)[-4000:]
    compose = yaml.safe_load((stack / "compose.yml").read_text())
    assert compose["services"]["vllm"]["environment"]["SPARKOPS_TEST_GENERATION"] == "2"
    # The state the kill left: the file is new, the container the old one.
    ps = run_docker("compose", "--project-directory", str(stack), "ps", "-q", "vllm")
    assert ps.stdout == old_id

    run, _ = run_deploy(inventory)
    assert run.rc == 0, run.stdout[-5000:]
    assert "Restart the serving stack because it does not run what was rendered" in run.output
    assert "an earlier deploy stopped before restarting it" in run.text
    new_id = run_docker("compose", "--project-directory", str(stack), "ps", "-q", "vllm").stdout
    environ = json.loads(
        run_docker("inspect", "--format", "{{json .Config.Env}}", new_id.strip()).stdout
    )
    assert "SPARKOPS_TEST_GENERATION=2" in environ and f"VLLM_API_KEY={API_KEY}" in environ
    # compose itself finds nothing left to do: the container runs the rendered project.
    dry = run_docker("compose", "--project-directory", str(stack), "up", "--dry-run", "-d")
    actions = (dry.stdout + dry.stderr).strip().splitlines()
    assert actions and all(line.rstrip().endswith(("Running", "Healthy")) for line in actions), (
        dry.stdout + dry.stderr
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as resp:
        assert resp.status == 200


def _preflight_right_after_the_deploy_authenticates_and_accepts_a_starting_container(
    inventory: Path,
) -> None:
    """preflight.yml seconds after the deploy (Docker's health check still in its start
    period): its probes send the stack's key (no 401), the chat completion answers, and the
    container is not sent to be restarted. The GPU checks fail here (no GPU): only the serving
    checks are judged."""
    summaries = inventory.parent / "preflight"
    summaries.mkdir()
    run = run_playbook(
        "preflight.yml",
        inventory,
        extra_vars={
            "ansible_become": False,
            "sparkops_preflight_drop_caches": False,
            "sparkops_preflight_summary_dir": str(summaries),
        },
        inherit_env=False,
        cwd=REPO / "ansible",
        timeout=600,
    )
    assert (summaries / "localhost.json").exists(), run.stdout[-4000:]
    summary = json.loads((summaries / "localhost.json").read_text())
    found = {check["name"]: check for check in summary["checks"]}
    for name in ("vllm_healthy", "vllm_container", "vllm_answers"):
        assert found[name]["ok"], (found[name], run.stdout[-3000:])
    assert found["vllm_answers"]["detail"].startswith("tiny answered ")
    # A 401 as a status of its own (Ansible's temp folder names hold digit runs like "…7401.15").
    assert not re.search(r"\b401\b", run.output), run.output[-3000:]
    assert API_KEY not in run.output
    assert "Traceback" not in run.output


def _a_job_keeps_the_deployed_stack_record(stack: Path, port: int, tmp: Path) -> None:
    """The readable copy the role installs (what batch.yml passes with --stack-record) is
    root-owned 0644, the same record as the stack folder's, holds no secret, and ends up in a
    job's serving.jsonl as batch.yml's job would run it."""
    copy = tmp / "etc" / "stack-record.json"
    info = copy.stat()
    assert (info.st_mode & 0o777, info.st_uid) == (0o644, 0)
    text = copy.read_text(encoding="utf-8")
    assert text == (stack / "stack-record.json").read_text(encoding="utf-8")
    assert API_KEY not in text and HF_TOKEN not in text
    written = envfile.read((stack / "serving.env").read_text(encoding="utf-8"))
    assert written["VLLM_API_KEY"] == API_KEY  # it was deployed
    record = json.loads(text)
    assert record["profile"] == "cpu-tiny" and record["command"]
    body = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    line = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    (tmp / "job.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    job = subprocess.run(
        [
            sys.executable, "-m", "sparkops.cli", "batch", "run", "--input",
            str(tmp / "job.jsonl"), "--out", str(tmp / "job"), "--endpoint",
            f"http://127.0.0.1:{port}", "--api-key-env", "SPARKOPS_API_KEY", "--no-progress",
            "--stack-record", str(copy),
        ],
        env={"PATH": os.environ["PATH"], "SPARKOPS_API_KEY": API_KEY},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-3000:]
    assert "Traceback" not in job.stdout + job.stderr
    start = json.loads((tmp / "job" / "serving.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["stack"] == record
    served = (tmp / "job" / "serving.jsonl").read_text(encoding="utf-8")
    assert API_KEY not in served and HF_TOKEN not in served


def _wait_healthy(container_id: str) -> dict:
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        out = run_docker("inspect", "--format", "{{json .State.Health}}", container_id).stdout
        health = json.loads(out)
        # Under load a slow start can read "unhealthy" for a while (retries used up after
        # start_period) before the server answers: only "healthy" or the deadline ends the wait.
        if health["Status"] == "healthy" or time.monotonic() > deadline:
            return health
        time.sleep(2)


def _seconds_between(start: str, end: str) -> float:
    """Seconds between two Docker timestamps (RFC 3339 with nanoseconds)."""

    def parse(stamp: str) -> datetime:
        stamp = re.sub(r"(\.\d{6})\d*", r"\1", stamp.replace("Z", "+00:00"))
        return datetime.fromisoformat(stamp)

    return (parse(end) - parse(start)).total_seconds()


@pytest.mark.timeout(900)
def test_a_vllm_that_dies_at_start_stops_the_deploy_at_once_with_a_clean_log_tail(
    local_stack, tmp_path
):
    """A model folder vLLM cannot load: the container exits and Docker restarts it (policy
    unless-stopped). The deploy stops as soon as it sees that, not after its 900 s wait, and
    prints the log tail without terminal escapes."""
    broken = tmp_path / "broken-model"
    shutil.copytree(ensure_tiny_model(), broken)
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    inventory, _, _ = local_stack("dies", vllm_serving_model_dir=str(broken))
    run, _ = run_deploy(inventory)
    assert run.rc != 0
    stopped = r"the container \S+ (is restarting|exited \(code \d+\)) (\d+) s into the wait"
    found = re.search(stopped, run.text)
    assert found, run.stdout[-4000:]
    assert "Log tail of" in run.text and "no-such-architecture" in run.text
    assert "\x1b" not in run.output and "\\u001b" not in run.output
    assert "Traceback" not in run.stderr
    # It stopped on the container's state, not on vllm_serving_ready_timeout (900 s).
    assert int(found.group(2)) < 900
    print(
        f"\ndeploy of a vLLM that dies at start: stopped {found.group(2)} s into the wait "
        f"(whole playbook {run.seconds:.0f} s)"
    )


@pytest.mark.timeout(1500)
def test_a_healthy_server_whose_requests_fail_fails_the_deploy(local_stack, tmp_path):
    """/health answers 200 while every chat completion fails (a chat template that raises):
    the deploy's last check sends one real request and stops, naming what vLLM answered."""
    broken = tmp_path / "template-model"
    shutil.copytree(ensure_tiny_model(), broken)
    (broken / "chat_template.jinja").write_text(
        "{{ raise_exception('sparkops: broken template') }}"
    )
    config = broken / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    settings.pop("chat_template", None)
    config.write_text(json.dumps(settings))
    inventory, port, _ = local_stack("requests-fail", vllm_serving_model_dir=str(broken))
    run, _ = run_deploy(inventory)
    assert run.rc != 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as resp:
        assert resp.status == 200  # healthy, yet unusable
    assert "/health answers 200 but a chat completion for 'tiny' failed: 400" in run.text
    assert "broken template" in run.text
    assert API_KEY not in run.output
    assert "Traceback" not in run.stderr


@pytest.mark.timeout(600)
def test_too_small_a_dev_shm_and_a_missing_model_stop_before_any_change(local_stack, tmp_path):
    """The start-up needs are checked before anything is written: /dev/shm (this machine's,
    against a bar above it) and the local model folder."""
    inventory, _, stack = local_stack("shm", vllm_serving_min_shm_mib=10**9)
    run, changed = run_deploy(inventory)
    assert run.rc != 0 and changed == 0
    assert re.search(r"/dev/shm on localhost has \d+ MiB free of \d+ MiB", run.text)
    assert "mount -o remount,size=" in run.text
    assert not stack.exists()
    inventory, _, stack = local_stack("nomodel", vllm_serving_model_dir=str(tmp_path / "none"))
    run, changed = run_deploy(inventory)
    assert run.rc != 0 and changed == 0
    assert f"has no {tmp_path / 'none'}/config.json" in run.text
    assert not stack.exists()


@pytest.mark.timeout(600)
def test_check_mode_on_a_host_never_deployed_shows_the_first_deploy(local_stack):
    """--check before the first deploy: nothing to start yet, so it says what a first deploy
    would do and changes nothing."""
    inventory, _, stack = local_stack("check")
    run = run_playbook(
        "deploy.yml", inventory, "-e", "ansible_become=false", check=True, diff=True,
        inherit_env=False, cwd=REPO / "ansible", timeout=600,
    )  # fmt: skip
    assert run.rc == 0, run.stdout[-4000:]
    assert "would start the compose project in" in run.text
    assert "Could not find" not in run.output and "Traceback" not in run.output
    assert not stack.exists()


def _hub_cache_with(model: Path, cache: Path, repo: str) -> None:
    """``cache`` as huggingface_hub leaves it after downloading ``model`` as ``repo``, with the
    record the deploy's fetcher writes once it verified the download."""
    sha = "0" * 40
    base = cache / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = base / "snapshots" / sha
    shutil.copytree(model, snapshot)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(sha)
    files = {p.name: p.stat().st_size for p in snapshot.iterdir() if p.is_file()}
    where = str(snapshot.relative_to(cache))  # the fetcher records it relative to HF_HOME
    record = {"repo": repo, "revision": sha, "snapshot": where, "files": files}
    (cache / "sparkops-models").mkdir(parents=True, exist_ok=True)
    (cache / "sparkops-models" / f"{repo}.json").write_text(json.dumps(record))


@pytest.mark.timeout(600)
def test_a_hub_model_that_cannot_be_fetched_stops_the_deploy_before_vllm_starts(local_stack):
    """Issue 24 item 2, without a hub (none is reachable here): with no local folder, a model
    missing from the cache is fetched on the host before any vLLM starts, and a failed fetch
    stops the deploy with the reason, in seconds, and no vLLM running. (A model complete in the
    cache is served offline: test_deploy_converges_and_a_second_run_changes_nothing.)"""
    inventory, _, stack = local_stack("hub", vllm_serving_model_dir="")
    run, _ = run_deploy(inventory)
    assert run.rc != 0
    assert "The download of tiny on localhost failed:" in run.text, run.stdout[-4000:]
    assert "tiny: cannot reach the hub at " in run.text  # the fetcher's reason, in seconds
    # A progress line a round (15 s each), and none after the round that saw the job end.
    assert run.text.count("tiny: 0.00 GB, the download ended") == 1
    assert 1 <= run.text.count("tiny: 0.00 GB") <= 3
    assert "Traceback" not in run.stderr
    ps = run_docker("compose", "--project-directory", str(stack), "ps", "-aq", check=False)
    assert ps.stdout.strip() == ""  # vLLM never started
    # A wait for the download timeout (7,200 s) would fail the test's bound (600 s) first.


@pytest.mark.timeout(900)
def test_the_gb10_base_is_pinned_once_and_kept_from_the_file_beside_the_inventory(local_stack):
    """Issue 24 item 1, in check mode (no registry is reachable here, so nothing is pulled or
    built): a first deploy says it would pull the base tag and pin its digest in the file beside
    the inventory; with that file present the deploy builds FROM its digest, which the stack
    record carries, and pulls nothing."""
    gb10 = {
        "vllm_serving_profile": "gb10-gemma4-12b-fp8",
        "vllm_serving_image": "",
        "vllm_serving_model_dir": "",
        "vllm_serving_memory_guard": False,  # this machine is not a Spark
        "vllm_serving_extra_volumes": [],
        "vllm_serving_extra_env": {},
    }
    inventory, _, stack = local_stack("gb10", **gb10)
    check = ["-e", "ansible_become=false"]
    first = run_playbook(
        "deploy.yml", inventory, *check, check=True, diff=True, inherit_env=False,
        cwd=REPO / "ansible", timeout=600,
    )  # fmt: skip
    assert first.rc == 0, first.stdout[-4000:]
    lock = inventory / ".sparkops-base-image.yml"
    would = "would pull vllm/vllm-openai:v0.32.0 on localhost, build the kit's image FROM the"
    assert f"{would} digest it gets and write it to {lock}" in first.text
    assert not lock.exists() and not stack.exists()

    digest = "sha256:" + "ab" * 32
    lock.write_text(yaml.safe_dump({"image": "vllm/vllm-openai:v0.32.0", "digest": digest}))
    kept = run_playbook(
        "deploy.yml", inventory, *check, check=True, diff=True, inherit_env=False,
        cwd=REPO / "ansible", timeout=600,
    )  # fmt: skip
    assert kept.rc == 0, kept.stdout[-4000:]
    assert "would pull" not in kept.text
    assert f'"base_digest": "{digest}"' in kept.text  # the stack record's diff
    assert "would build sparkops/vllm:gb10 from docker/vllm" in kept.text
