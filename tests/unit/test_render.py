"""`sparkops render`: inventory + profile -> each host's files, through templates/.

`make_inventory` (tests/plugins/inventories.py) builds the example topologies in a temporary
folder; the integration tests use it too, to render the stacks they run for real.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from sparkops.errors import UserError
from sparkops.profiles import load_profile
from sparkops.render import render_inventory
from sparkops.render.images import required_images
from sparkops.render.inventory import read_inventory
from sparkops.render.stack import client_endpoints, plan_stack
from sparkops.versions import LITELLM_VERSION
from tests.plugins.inventories import make_inventory


def _compose(out: Path, host: str) -> dict:
    return yaml.safe_load((out / host / "compose.yml").read_text())


def test_single_host_stack(tmp_path):
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "single"), out)
    service = _compose(out, "spark-1")["services"]["vllm"]
    assert service["ports"] == ["127.0.0.1:8000:8000"]
    assert service["ipc"] == "host"
    assert service["restart"] == "unless-stopped"
    assert service["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert "/health" in service["healthcheck"]["test"][-1]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert service["env_file"] == ["serving.env"]
    assert service["environment"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert service["environment"]["VLLM_NO_USAGE_STATS"] == "1"
    assert service["entrypoint"] == ["vllm", "serve"]
    assert service["command"][0] == "RedHatAI/gemma-4-12B-it-FP8-dynamic"
    assert service["volumes"] == ["/var/lib/sparkops/hf-cache:/root/.cache/huggingface"]
    assert stat.S_IMODE((out / "spark-1" / "serving.env").stat().st_mode) == 0o600
    unit = (out / "spark-1" / "sparkops-serving.service").read_text()
    assert "WantedBy=multi-user.target" in unit and "docker compose" in unit
    assert sorted(p.name for p in (out / "spark-1").iterdir()) == [
        "compose.yml",
        "load-guard.json",  # the memory guard through the model load (a GB10 profile)
        "load-guard.py",
        "memory-guard.sh",
        "serving.env",
        "sparkops-serving.service",
        "stack-record.json",
    ]


def test_secrets_go_to_the_env_file_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    monkeypatch.setenv("VLLM_API_KEY", "api-secret")
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "single"), out)
    env_file = (out / "spark-1" / "serving.env").read_text()
    assert "HF_TOKEN=hf_secret_token" in env_file and "VLLM_API_KEY=api-secret" in env_file
    assert "secret" not in (out / "spark-1" / "compose.yml").read_text()


def test_public_bind_is_refused_unless_asked(tmp_path):
    inv = make_inventory(tmp_path / "inv", "single", vllm_serving_bind_address="0.0.0.0")
    with pytest.raises(UserError, match="vllm_serving_allow_public_bind"):
        render_inventory(inv, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written before validation passed
    inv = make_inventory(
        tmp_path / "inv",
        "single",
        vllm_serving_bind_address="0.0.0.0",
        vllm_serving_allow_public_bind=True,
    )
    render_inventory(inv, tmp_path / "out")
    assert _compose(tmp_path / "out", "spark-1")["services"]["vllm"]["ports"] == [
        "0.0.0.0:8000:8000"
    ]


def test_profile_problems_stop_the_render(tmp_path):
    inv = make_inventory(tmp_path / "inv", "single", vllm_serving_concurrency=4096)
    with pytest.raises(UserError, match="profile gb10-gemma4-12b-fp8: max_num_seqs 1024"):
        render_inventory(inv, tmp_path / "out")


def test_typo_in_a_role_variable_is_refused(tmp_path):
    inv = make_inventory(tmp_path / "inv", "single", vllm_serving_bind_adress="127.0.0.1")
    # validate_inventory.yml's sentence, with the name meant (it said "check its spelling")
    with pytest.raises(
        UserError,
        match=r"vllm_serving_bind_adress is not a variable of the role vllm_serving \(did you "
        r"mean vllm_serving_bind_address\?\)",
    ):
        render_inventory(inv, tmp_path / "out")


def test_data_parallel_router(tmp_path):
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "data-parallel"), out)
    assert _compose(out, "spark-2")["services"]["vllm"]["ports"] == ["10.0.0.12:8000:8000"]
    assert "router" not in _compose(out, "spark-2")["services"]
    router = _compose(out, "spark-1")["services"]["router"]
    assert router["ports"] == ["127.0.0.1:4000:4000"]
    assert router["env_file"] == ["router.env"]
    config = yaml.safe_load((out / "spark-1" / "litellm-config.yaml").read_text())
    names = {m["model_name"] for m in config["model_list"]}
    assert names == {"gemma4-12b-fp8dyn"}
    assert [m["litellm_params"]["api_base"] for m in config["model_list"]] == [
        "http://10.0.0.11:8000/v1",
        "http://10.0.0.12:8000/v1",
    ]
    assert {m["litellm_params"]["model"] for m in config["model_list"]} == {
        "hosted_vllm/gemma4-12b-fp8dyn"
    }
    settings = config["router_settings"]
    assert settings["routing_strategy"] == "simple-shuffle"
    assert (
        settings["num_retries"] >= 1
        and settings["cooldown_time"] > 0
        and settings["allowed_fails"] > 0
    )
    assert config["general_settings"]["background_health_checks"] is True
    assert config["general_settings"]["master_key"] == "os.environ/LITELLM_MASTER_KEY"
    env = (out / "spark-1" / "router.env").read_text()
    assert stat.S_IMODE((out / "spark-1" / "router.env").stat().st_mode) == 0o600
    key = next(line for line in env.splitlines() if line.startswith("LITELLM_MASTER_KEY="))
    assert len(key.split("=", 1)[1]) > 30
    render_inventory(make_inventory(tmp_path / "inv", "data-parallel"), out)
    assert key in (out / "spark-1" / "router.env").read_text()  # kept across renders


def test_pipeline_parallel_over_ray(tmp_path):
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "pipeline-ray"), out)
    head = _compose(out, "spark-1")["services"]["vllm"]
    worker = _compose(out, "spark-2")["services"]["vllm"]
    for service, own in ((head, "192.168.177.11"), (worker, "192.168.177.12")):
        env = service["environment"]
        assert service["network_mode"] == "host"
        assert service["ulimits"]["memlock"] == -1
        for name in (
            "NCCL_SOCKET_IFNAME",
            "GLOO_SOCKET_IFNAME",
            "TP_SOCKET_IFNAME",
            "UCX_NET_DEVICES",
            "OMPI_MCA_btl_tcp_if_include",
        ):
            assert env[name] == "enp1s0f1np1"
        assert env["VLLM_HOST_IP"] == own
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
        assert env["RAY_memory_monitor_refresh_ms"] == "0"
    assert "--pipeline-parallel-size 2 --distributed-executor-backend ray" in head["command"][0]
    assert head["command"][0].startswith("/opt/sparkops/ray-start.sh && exec vllm serve")
    assert "vllm serve" not in worker["command"][0]
    head_script = (out / "spark-1" / "ray-start.sh").read_text()
    worker_script = (out / "spark-2" / "ray-start.sh").read_text()
    assert "ray start --head --port=6379 --node-ip-address=192.168.177.11" in head_script
    assert "--address=192.168.177.11:6379 --node-ip-address=192.168.177.12" in worker_script
    assert "--disable-usage-stats" in worker_script


def test_pipeline_parallel_native_multinode(tmp_path):
    out = tmp_path / "out"
    render_inventory(make_inventory(tmp_path / "inv", "pipeline-mp"), out)
    head = _compose(out, "spark-1")["services"]["vllm"]["command"]
    worker = _compose(out, "spark-2")["services"]["vllm"]["command"]
    joined_head, joined_worker = " ".join(head), " ".join(worker)
    assert "--nnodes 2 --node-rank 0 --master-addr 192.168.177.11" in joined_head
    assert "--headless" not in joined_head
    assert "--nnodes 2 --node-rank 1 --master-addr 192.168.177.11" in joined_worker
    assert worker[-1] == "--headless"
    assert not (out / "spark-1" / "ray-start.sh").exists()


def test_pipeline_parallel_needs_the_qsfp_address(tmp_path):
    inv = make_inventory(tmp_path / "inv", "pipeline-ray", ray_cluster_address="")
    with pytest.raises(UserError, match="ray_cluster_address"):
        render_inventory(inv, tmp_path / "out")


def test_wrong_host_count_names_the_fix(tmp_path):
    inv = make_inventory(tmp_path / "inv", "single", vllm_serving_topology="multi-dp")
    # validate_inventory.yml's sentences (one check: sparkops.render.inventory_checks)
    with pytest.raises(UserError, match=r"needs at least two, found 1 \(spark-1\)"):
        render_inventory(inv, tmp_path / "out")
    inv = make_inventory(tmp_path / "inv4", "data-parallel-4", vllm_serving_topology="pair-pp")
    with pytest.raises(UserError, match="needs exactly two hosts in the group 'spark_pair'"):
        render_inventory(inv, tmp_path / "out")
    inv = make_inventory(tmp_path / "inv2", "data-parallel", vllm_serving_topology="single")
    with pytest.raises(UserError, match=r"runs on one host, but the inventory lists 2"):
        render_inventory(inv, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_data_parallel_over_four_sparks(tmp_path):
    """Every replica behind the router and in the client's endpoints, in inventory order."""
    out = tmp_path / "out"
    inv = make_inventory(tmp_path / "inv", "data-parallel-4")
    rendered = render_inventory(inv, out)
    assert list(rendered) == ["spark-1", "spark-2", "spark-3", "spark-4"]
    urls = [f"http://10.0.0.1{i}:8000/v1" for i in range(1, 5)]
    for i, host in enumerate(rendered, start=1):
        services = _compose(out, host)["services"]
        assert services["vllm"]["ports"] == [f"10.0.0.1{i}:8000:8000"]
        assert ("router" in services) is (host == "spark-1")
    config = yaml.safe_load((out / "spark-1" / "litellm-config.yaml").read_text())
    assert [m["litellm_params"]["api_base"] for m in config["model_list"]] == urls
    assert [m["model_info"]["id"] for m in config["model_list"]] == list(rendered)
    assert {m["model_name"] for m in config["model_list"]} == {"gemma4-12b-fp8dyn"}
    parsed = read_inventory(inv)
    assert client_endpoints(parsed, plan_stack(parsed, secrets={"LITELLM_MASTER_KEY": "k"})) == (
        urls
    )


def test_client_endpoints_follow_the_topology(tmp_path):
    single = read_inventory(make_inventory(tmp_path / "s", "single"))
    stacks = plan_stack(single)
    assert client_endpoints(single, stacks) == ["http://127.0.0.1:8000/v1"]  # loopback: on-host
    pipeline = read_inventory(make_inventory(tmp_path / "p", "pipeline-ray"))
    # the worker serves no HTTP: only the head is an endpoint
    assert client_endpoints(pipeline, plan_stack(pipeline)) == ["http://127.0.0.1:8000/v1"]


def test_inventory_precedence_and_references(tmp_path):
    inv = make_inventory(tmp_path / "inv", "data-parallel", vllm_serving_port=8000)
    (inv / "group_vars" / "sparks.yml").write_text("vllm_serving_port: 8100\n")
    (inv / "host_vars" / "spark-2").mkdir(parents=True)
    (inv / "host_vars" / "spark-2" / "serving.yml").write_text("vllm_serving_port: 8200\n")
    parsed = read_inventory(inv)
    assert parsed.hostvars["spark-1"]["vllm_serving_port"] == 8100
    assert parsed.hostvars["spark-2"]["vllm_serving_port"] == 8200
    assert parsed.hostvars["spark-2"]["vllm_serving_bind_address"] == "10.0.0.12"


def test_missing_inventory_names_the_fix(tmp_path):
    with pytest.raises(UserError, match=r"no hosts\.yml"):
        render_inventory(tmp_path, tmp_path / "out")


def test_cli_render(tmp_path, capsys):
    import argparse

    from sparkops.render.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "render",
            "--inventory",
            str(make_inventory(tmp_path / "inv", "single")),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert args.func(args) == 0
    assert "spark-1/compose.yml" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["single", "wsl2", "pair-dp", "pair-pp", "quad-dp", "local"])
def test_the_example_inventories_render(tmp_path, monkeypatch, name):
    """The repository's own inventories (provisioning's hosts.yml + our serving vars)."""
    monkeypatch.setenv("SPARKOPS_CACHE", str(tmp_path / "cache"))
    repo = Path(__file__).resolve().parents[2]
    rendered = render_inventory(repo / "inventory" / name, tmp_path / "out")
    roles = {"pair-dp": 2, "pair-pp": 2, "quad-dp": 4}.get(name, 1)
    assert len(rendered) == roles
    first = next(iter(rendered))
    compose = _compose(tmp_path / "out", first)
    if name == "pair-pp":
        env = compose["services"]["vllm"]["environment"]
        assert env["VLLM_HOST_IP"] == env["MASTER_ADDR"]
        assert env["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    if name in ("pair-dp", "quad-dp"):
        assert "router" in compose["services"]
        config = yaml.safe_load((tmp_path / "out" / first / "litellm-config.yaml").read_text())
        assert len(config["model_list"]) == roles
    if name == "local":
        assert compose["services"]["vllm"]["command"][0] == str(
            tmp_path / "cache" / "models" / "tiny"
        )


def _images(tmp_path: Path, topology: str, **extra) -> dict[str, list[dict]]:
    inv = read_inventory(make_inventory(tmp_path / topology, topology, **extra))
    stacks = plan_stack(inv, secrets={"LITELLM_MASTER_KEY": "k"})
    return {host: required_images(stack) for host, stack in stacks.items()}


def test_required_images_follow_the_stack(tmp_path):
    """What the deploy builds or checks before `compose up` (tests/infra/test_deploy_images.py
    runs it): vLLM everywhere, xxhash for the profile's hash, Ray on the Ray pair, LiteLLM on
    the router host only."""
    single = _images(tmp_path, "single")["spark-1"]
    assert [(i["name"], i["modules"]) for i in single] == [
        ("sparkops/vllm:gb10", ["vllm", "xxhash", "flashinfer_cubin"])
    ]
    assert single[0]["build"]["context"] == "vllm"
    assert "set vllm_serving_base_digest" in single[0]["build"]["problem"]
    probe = single[0]["probe"]
    assert probe[:7] == ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3"]
    assert "VLLM_NO_USAGE_STATS=1" in probe
    dp = _images(tmp_path, "data-parallel-4")
    assert [i["name"] for i in dp["spark-1"]] == ["sparkops/vllm:gb10", "sparkops/litellm:local"]
    router = dp["spark-1"][1]
    assert router["build"] == {
        "context": "litellm",
        "args": {"BASE_IMAGE": "python:3.12-slim", "LITELLM_VERSION": LITELLM_VERSION},
        "problem": "",
    }
    assert "LITELLM_LOCAL_MODEL_COST_MAP=True" in router["probe"]
    assert all(len(dp[h]) == 1 for h in ("spark-2", "spark-3", "spark-4"))
    ray = _images(tmp_path, "pipeline-ray")
    kit = ["vllm", "xxhash", "ray", "flashinfer_cubin"]
    assert all(images[0]["modules"] == kit for images in ray.values())
    native = _images(tmp_path, "pipeline-mp")
    assert all("ray" not in images[0]["modules"] for images in native.values())


def test_a_pinned_digest_builds_and_a_users_own_image_is_only_checked(tmp_path):
    digest = "sha256:" + "a" * 64
    (pinned,) = _images(tmp_path, "single", vllm_serving_base_digest=digest)["spark-1"]
    assert pinned["build"]["problem"] == ""
    assert pinned["build"]["args"]["VLLM_DIGEST"] == digest
    with pytest.raises(UserError, match="vllm_serving_base_digest"):
        _images(tmp_path / "bad", "single", vllm_serving_base_digest="latest")
    (own,) = _images(tmp_path / "own", "single", vllm_serving_image="lab/vllm:1")["spark-1"]
    assert own["build"] is None and own["name"] == "lab/vllm:1"


def test_a_profiles_image_is_used_unless_the_inventory_names_one(tmp_path):
    """NVIDIA's own vLLM container is a profile's `image:` (docker/README.md)."""
    data = load_profile("gb10-llama31-8b-fp8").model_dump(exclude_none=True)
    data["image"] = "example/vllm-nvidia:1"
    (tmp_path / "nv.yaml").write_text(yaml.safe_dump(data))
    inv = make_inventory(tmp_path / "a", "single", vllm_serving_profile=str(tmp_path / "nv.yaml"))
    render_inventory(inv, tmp_path / "out")
    assert _compose(tmp_path / "out", "spark-1")["services"]["vllm"]["image"] == data["image"]
    (image,) = _images(tmp_path, "single", vllm_serving_profile=str(tmp_path / "nv.yaml"))[
        "spark-1"
    ]
    assert image["build"] is None  # the kit never builds someone else's image
    inv = make_inventory(
        tmp_path / "b",
        "single",
        vllm_serving_profile=str(tmp_path / "nv.yaml"),
        vllm_serving_image="lab/vllm:2",
    )
    render_inventory(inv, tmp_path / "out2")
    assert _compose(tmp_path / "out2", "spark-1")["services"]["vllm"]["image"] == "lab/vllm:2"
    data["image"] = "has space"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="'image'"):
        load_profile(tmp_path / "bad.yaml")


def test_the_ansible_filter_gives_batch_jobs_every_replica(tmp_path):
    """batch.yml's endpoints: `hostvars | sparkops_client_endpoints(groups)`, no master key."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "ansible/plugins/filter/sparkops_render.py"
    spec = importlib.util.spec_from_file_location("sparkops_render_filter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inv = read_inventory(make_inventory(tmp_path / "inv", "data-parallel-4"))
    groups = {"all": inv.hosts, "sparks": inv.hosts}
    urls = module.sparkops_client_endpoints(inv.hostvars, groups)
    assert urls == [f"http://10.0.0.1{i}:8000/v1" for i in range(1, 5)]
    assert "sparkops_client_endpoints" in module.FilterModule().filters()


def test_the_compose_header_names_the_inventory_s_topology_and_no_ignored_shm_size(tmp_path):
    """Issue 31 item 14: the wsl2 laptop's compose.yml said "rtx-spark (single)", and the
    pipeline pair's set shm_size beside `ipc: host`, where Docker ignores it."""
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    render_inventory(repo / "inventory" / "wsl2", out)
    header = (out / "rtx-spark" / "compose.yml").read_text().splitlines()
    assert any(
        "Serving stack for rtx-spark: topology wsl2, this host as single" in line for line in header
    )
    render_inventory(make_inventory(tmp_path / "inv", "pipeline-ray"), out)
    for host in ("spark-1", "spark-2"):
        vllm = _compose(out, host)["services"]["vllm"]
        assert vllm["ipc"] == "host" and "shm_size" not in vllm
    assert "topology pair-pp, this host as head" in (out / "spark-1" / "compose.yml").read_text()
