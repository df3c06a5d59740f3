"""Model profiles: the shipped YAML files load, and each deployment rule refuses bad input
with a message naming the profile and the fix."""

from __future__ import annotations

import shlex

import pytest
import yaml

from sparkops.errors import UserError
from sparkops.profiles import (
    DeployFacts,
    async_scheduling_flag,
    available_profiles,
    check_profile,
    load_profile,
    profile_problems,
)
from sparkops.profiles.checks import fits_one_host, memory_need_bytes
from sparkops.render.command import serve_command
from sparkops.units import GIB

# The seed's recommended command, as printed in the post (model, then flags in this order).
SEED_COMMAND = """vllm serve RedHatAI/gemma-4-12B-it-FP8-dynamic
  --served-model-name gemma4-12b-fp8dyn --max-model-len 8192 --gpu-memory-utilization 0.20
  --kv-cache-memory-bytes 64424509440 --kv-cache-dtype fp8 --max-num-batched-tokens 32768
  --max-num-seqs 1024 --enable-prefix-caching --prefix-caching-hash-algo xxhash
  --async-scheduling --limit-mm-per-prompt '{"image":0,"audio":0,"video":0}' --seed 1234"""


def test_the_kit_ships_the_required_profiles():
    names = available_profiles()
    for required in (
        "gb10-gemma4-12b-fp8",
        "gb10-gemma4-12b-4bit",
        "gb10-llama31-8b-fp8",
        "cpu-tiny",
    ):
        assert required in names
    for name in names:
        assert load_profile(name).name == name


def test_fp8_profile_is_the_seed_command_flag_for_flag():
    profile = load_profile("gb10-gemma4-12b-fp8")
    argv = serve_command(profile, model=profile.model, host="127.0.0.1", port=8000)
    seed = shlex.split(SEED_COMMAND)
    assert argv[: len(seed)] == seed
    # the kit adds only per-call cached tokens (for the per-step report) and the address
    assert argv[len(seed) :] == [
        "--enable-prompt-tokens-details", "--host", "127.0.0.1", "--port", "8000",
    ]  # fmt: skip
    assert profile.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_cpu_profile_runs_the_api_server_module():
    profile = load_profile("cpu-tiny")
    argv = serve_command(profile, model="/m/tiny", host="0.0.0.0", port=9)
    assert argv[:5] == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/tiny"]
    assert "--prefix-caching-hash-algo" in argv


def _write(tmp_path, data: dict):
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _fp8_data() -> dict:
    profile = load_profile("gb10-gemma4-12b-fp8")
    return profile.model_dump(exclude_none=True)


def test_unknown_keys_are_refused_with_their_path(tmp_path):
    data = _fp8_data()
    data["vllm"]["max_num_seq"] = 64
    with pytest.raises(UserError) as err:
        load_profile(_write(tmp_path, data))
    assert "unknown key 'vllm.max_num_seq'" in str(err.value)
    assert "custom.yaml" in str(err.value)


def test_unknown_profile_name_lists_the_available_ones():
    with pytest.raises(UserError, match="cpu-tiny"):
        load_profile("no-such-profile")


def test_concurrency_above_max_num_seqs_is_refused():
    profile = load_profile("gb10-gemma4-12b-fp8")
    assert profile_problems(profile, DeployFacts(concurrency=1000)) == []
    with pytest.raises(UserError) as err:
        check_profile(profile, DeployFacts(concurrency=2000))
    message = str(err.value)
    assert "profile gb10-gemma4-12b-fp8" in message
    assert "max_num_seqs 1024 is below the job's concurrency 2000" in message
    assert "raise vllm.max_num_seqs" in message


def test_kv_cache_above_54_gib_needs_expandable_segments(tmp_path):
    data = _fp8_data()
    data["env"] = {}
    profile = load_profile(_write(tmp_path, data))
    (problem,) = profile_problems(profile, DeployFacts())
    assert "60.0 GiB (above 54 GiB)" in problem
    assert "PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True" in problem
    data["vllm"]["kv_cache_memory_bytes"] = 54 * 2**30  # the largest that starts without it
    assert profile_problems(load_profile(_write(tmp_path, data)), DeployFacts()) == []


def test_weights_plus_kv_over_the_gpu_budget_is_refused():
    profile = load_profile("gb10-gemma4-12b-fp8")  # 13.5 GiB weights + 60 GiB KV
    assert profile_problems(profile, DeployFacts(host="laptop", gpu_memory_gib=89)) == []
    (problem,) = profile_problems(profile, DeployFacts(host="laptop", gpu_memory_gib=64))
    assert "need 73.5 GiB, over laptop's GPU memory budget of 64.0 GiB" in problem
    assert "lower vllm.kv_cache_memory_bytes" in problem


def test_gated_model_needs_a_token():
    profile = load_profile("gb10-gemma4-12b-4bit")
    (problem,) = profile_problems(profile, DeployFacts())
    assert "gated" in problem and "vllm_serving_hf_token" in problem
    assert profile_problems(profile, DeployFacts(hf_token=True)) == []


def test_every_problem_is_reported_at_once(tmp_path):
    data = _fp8_data()
    data["env"] = {}
    data["gated"] = True
    profile = load_profile(_write(tmp_path, data))
    problems = profile_problems(profile, DeployFacts(concurrency=5000, gpu_memory_gib=32))
    assert len(problems) == 4


@pytest.mark.parametrize(
    "flags", [["--pipeline-parallel-size", "2"], ["--pipeline-parallel-size=2"], ["-pp", "2"]]
)
def test_cpu_pipeline_parallel_with_enforce_eager_is_refused(tmp_path, flags):
    data = load_profile("cpu-tiny").model_dump(exclude_none=True)
    data["vllm"]["extra_args"] = flags
    (problem,) = profile_problems(load_profile(_write(tmp_path, data)), DeployFacts())
    assert "profile cpu-tiny: pipeline parallel size 2 with enforce_eager" in problem
    assert "set vllm.enforce_eager: false" in problem
    data["vllm"]["enforce_eager"] = False
    assert profile_problems(load_profile(_write(tmp_path, data)), DeployFacts()) == []
    data["vllm"]["enforce_eager"] = True
    data["vllm"]["extra_args"] = ["--pipeline-parallel-size", "1"]
    assert profile_problems(load_profile(_write(tmp_path, data)), DeployFacts()) == []


def _pp_argv(profile, stages: int = 2) -> list[str]:
    parallel = ["--pipeline-parallel-size", str(stages)] if stages > 1 else None
    return serve_command(
        profile, model=profile.model, host="h", port=1, parallel=parallel, stages=stages
    )


def test_pipeline_parallel_leaves_async_scheduling_to_vllm(tmp_path):
    """vLLM 0.32's runner V1 refuses PP + --async-scheduling (tests/integration/
    test_vllm_pp_async.py shows it against vLLM's config code): PP drops the flag."""
    profile = load_profile("gb10-gemma4-12b-fp8")
    assert profile.vllm.async_scheduling
    assert async_scheduling_flag(profile) is True
    assert async_scheduling_flag(profile, 2) is False
    assert "--async-scheduling" in _pp_argv(profile, stages=1)
    assert "--async-scheduling" not in _pp_argv(profile)
    # PP given among the profile's own extra flags counts too
    data = profile.model_dump(exclude_none=True)
    data["vllm"]["extra_args"] = ["-pp", "2"]
    assert async_scheduling_flag(load_profile(_write(tmp_path, data))) is False


@pytest.mark.parametrize("value, kept", [("1", True), ("true", True), ("0", False), ("", False)])
def test_a_profile_pinning_runner_v2_keeps_async_scheduling_with_pp(tmp_path, value, kept):
    data = load_profile("gb10-llama31-8b-fp8").model_dump(exclude_none=True)
    data["env"]["VLLM_USE_V2_MODEL_RUNNER"] = value
    profile = load_profile(_write(tmp_path, data))
    assert ("--async-scheduling" in _pp_argv(profile)) is kept


def test_async_scheduling_in_extra_args_with_pp_is_refused_unless_v2_is_pinned(tmp_path):
    data = load_profile("gb10-llama31-8b-fp8").model_dump(exclude_none=True)
    data["vllm"]["async_scheduling"] = False
    data["vllm"]["extra_args"] = ["--async-scheduling"]
    profile = load_profile(_write(tmp_path, data))
    assert profile_problems(profile, DeployFacts()) == []  # one stage: fine
    (problem,) = profile_problems(profile, DeployFacts(pipeline_parallel=2))
    assert "Model Runner V1 does not support: pipeline parallelism" in problem
    assert "remove it from extra_args" in problem
    assert "VLLM_USE_V2_MODEL_RUNNER" in problem
    data["env"]["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    pinned = load_profile(_write(tmp_path, data))
    assert profile_problems(pinned, DeployFacts(pipeline_parallel=2)) == []


def test_each_pipeline_stage_holds_its_share_of_the_weights():
    """The pair-pp profile does not fit one Spark; on the pair each holds half the layers."""
    profile = load_profile("gb10-qwen25-72b-bf16")
    kv = profile.vllm.kv_cache_memory_bytes
    assert memory_need_bytes(profile, 110, stages=1) == int(135.4 * GIB) + kv
    assert memory_need_bytes(profile, 110, stages=2) == int(135.4 * GIB / 2) + kv
    assert not fits_one_host(profile, 110)
    assert fits_one_host(load_profile("gb10-gemma4-12b-fp8"), 110)
    assert profile_problems(profile, DeployFacts(gpu_memory_gib=110, pipeline_parallel=2)) == []
    (problem,) = profile_problems(profile, DeployFacts(gpu_memory_gib=80, pipeline_parallel=2))
    assert "weights (67.7 GiB, 1/2 of 135.4 GiB) + KV cache need 91.7 GiB, over" in problem
