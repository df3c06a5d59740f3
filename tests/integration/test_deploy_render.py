"""Every topology x profile renders, and the real `docker compose config` accepts every
compose file it writes (the check compose itself runs before `up`)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from sparkops.errors import UserError
from sparkops.plan.guard import GB10_TOTAL_GB
from sparkops.profiles import available_profiles, load_profile
from sparkops.render import render_inventory
from sparkops.units import GB, GIB
from tests.plugins.inventories import TOPOLOGIES, make_inventory

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("profile", available_profiles())
@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_compose_config_accepts_every_rendered_stack(tmp_path, monkeypatch, topology, profile):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")  # the gated profile needs one
    extra = {"vllm_serving_profile": profile}
    if profile == "cpu-tiny":
        extra.update(
            vllm_serving_model_dir=str(tmp_path / "models" / "tiny"), vllm_serving_gpus=False
        )
    inventory = make_inventory(tmp_path / "inv", topology, **extra)
    too_big_for_one = load_profile(profile).weights_gib * GIB > GB10_TOTAL_GB * GB
    if too_big_for_one and not topology.startswith("pipeline"):
        # A model only a pipeline pair can hold is refused on one Spark, and nothing is written.
        with pytest.raises(UserError, match=r"it cannot load\..*split it over two Sparks"):
            render_inventory(inventory, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        return
    if profile == "cpu-tiny" and topology.startswith("pipeline"):
        # An eager vLLM-CPU worker fails every request with PP (profiles/checks.py): refused,
        # and the stack renders once the profile compiles.
        with pytest.raises(UserError, match=r"set vllm\.enforce_eager: false"):
            render_inventory(inventory, tmp_path / "out")
        data = load_profile("cpu-tiny").model_dump(exclude_none=True)
        data["vllm"]["enforce_eager"] = False
        (tmp_path / "cpu-tiny.yaml").write_text(yaml.safe_dump(data))
        extra["vllm_serving_profile"] = str(tmp_path / "cpu-tiny.yaml")
        inventory = make_inventory(tmp_path / "inv", topology, **extra)
    rendered = render_inventory(inventory, tmp_path / "out")
    for host in rendered:
        folder = tmp_path / "out" / host
        result = subprocess.run(
            ["docker", "compose", "config", "--format", "json"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        config = json.loads(result.stdout)
        vllm = config["services"]["vllm"]
        assert vllm["restart"] == "unless-stopped"
        assert vllm["ipc"] == "host"
        assert vllm["ulimits"]["memlock"] in (-1, {"soft": -1, "hard": -1})
        # compose reads the secrets file itself: HF_TOKEN reaches the container's environment
        assert vllm["environment"]["HF_TOKEN"] == "hf_test_token"
        assert vllm["environment"]["DO_NOT_TRACK"] == "1"
        if topology.startswith("pipeline"):
            assert vllm["network_mode"] == "host"
        else:
            (port,) = vllm["ports"]
            assert port["host_ip"] != "0.0.0.0"
        if profile.startswith("gb10"):
            (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
            assert device["capabilities"] == ["gpu"]
        else:
            assert "deploy" not in vllm
        if host == "spark-1" and topology.startswith("data-parallel"):
            router = config["services"]["router"]
            assert router["environment"]["LITELLM_MASTER_KEY"].startswith("sk-")
            assert router["environment"]["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
            assert router["depends_on"]["vllm"]["condition"] == "service_healthy"


HOSTILE_KEYS = ["sk-a$HOME b", "sk-${HOME}-$$-$", "q'uo\"te`bt`", "100%PATH%", "back\\slash #x"]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_a_hostile_key_reaches_the_router_and_vllm_unchanged(tmp_path, monkeypatch, key):
    """Issue 34 item 4, router.env beside vllm.env: real `docker compose config` reads the
    rendered env files as `up` would, and every secret comes out as written (compose would
    otherwise interpolate `$HOME` or `${HOME}`)."""
    monkeypatch.setenv("HOME", "/root-should-not-appear")
    monkeypatch.setenv("HF_TOKEN", key)
    inventory = make_inventory(
        tmp_path / "inv",
        "data-parallel",
        vllm_serving_api_key=key,
        litellm_router_master_key=key[::-1],
    )
    render_inventory(inventory, tmp_path / "out")
    result = subprocess.run(
        ["docker", "compose", "config", "--format", "json"],
        cwd=tmp_path / "out" / "spark-1",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]

    def value(service: str, name: str) -> str:
        # `compose config` prints a compose file: a literal `$` in it is written `$$` again
        return services[service]["environment"][name].replace("$$", "$")

    assert value("vllm", "VLLM_API_KEY") == key
    assert value("vllm", "HF_TOKEN") == key
    assert value("router", "LITELLM_MASTER_KEY") == key[::-1]
    assert "/root-should-not-appear" not in result.stdout
