"""The whole-host memory guard (sparkops.plan.guard) against the seeds' memory figures and the
fixtures of a DGX Spark and an RTX Spark under WSL2 (tests/fixtures/memory).

The seeds' figures quoted here:
- first seed: RTX Spark, 128 GB shared, "96 GB of it set aside for the GPU", "Windows and WSL
  share only about 32 GB"; "a 60 GiB KV cache, the largest that would start alongside the FP8
  weights"; the 4-bit model needs "a little over 60 GB ... about 7 GB for the model and 54 GB
  for the KV cache";
- second seed: "--gpu-memory-utilization 0.88, so ~112 GB usable", "Leave ~12 GB for
  Grace-side processes", and its sizing table (Llama-3.3-70B FP8: 70 GB, 0.16 MB per token).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sparkops.errors import UserError
from sparkops.plan.guard import (
    GuardSettings,
    HostFacts,
    check_launch,
    host_facts,
    host_kind,
    parse_compute_apps,
    parse_gpu_total,
    parse_meminfo,
    start_bar_bytes,
)
from sparkops.plan.memory import GB, GIB, MIB, plan_memory
from sparkops.profiles import load_profile
from tests.plugins.cli import sparkops

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "memory"
FP8 = load_profile("gb10-gemma4-12b-fp8")
FOUR_BIT = load_profile("gb10-gemma4-12b-4bit")
LLAMA_70B = {
    "model_type": "llama",
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
}


def with_kv(profile, kv_bytes: int):
    return profile.model_copy(
        update={"vllm": profile.vllm.model_copy(update={"kv_cache_memory_bytes": kv_bytes})}
    )


def fixture_facts(name: str, kind: str, apps: str = "", gpu_total: str = "", own=()):
    return host_facts(
        meminfo=(FIXTURES / f"{name}.meminfo").read_text(),
        kind=kind,
        compute_apps=apps,
        gpu_total=gpu_total,
        own_pids=list(own),
    )


def wsl2_rtx_spark() -> HostFacts:
    # The NVIDIA app's 96 GB for the GPU, as nvidia-smi reports it in MiB.
    total = (FIXTURES / "rtx-spark-wsl2" / "gpu-memory-total").read_text()
    return fixture_facts("rtx-spark-wsl2", "wsl2", gpu_total=total)


# --- parsing the host's own formats -------------------------------------------------------


def test_meminfo_of_a_dgx_spark():
    mem = parse_meminfo((FIXTURES / "dgx-spark.meminfo").read_text())
    assert mem["MemTotal"] == 125_535_208 * 1024
    assert mem["MemAvailable"] == 120_962_184 * 1024
    assert mem["HugePages_Total"] == 0  # a count, not kB
    assert mem["Active(file)"] == 1_398_572 * 1024


def test_compute_apps_with_header_units_and_unknown_memory():
    text = (
        "pid, process_name, used_gpu_memory [MiB]\n"
        "48213, VLLM::EngineCore, 20480 MiB\n"
        "2317, /usr/bin/python3, [N/A]\n"
    )
    procs = parse_compute_apps(text)
    assert [(p.pid, p.name, p.used_bytes) for p in procs] == [
        (48213, "VLLM::EngineCore", 20480 * MIB),
        (2317, "/usr/bin/python3", None),
    ]
    assert parse_compute_apps("") == ()
    assert parse_gpu_total("[N/A]\n") is None  # a GB10's unified memory
    assert parse_gpu_total("91553\n") == 91553 * MIB


def test_wsl2_is_read_from_the_kernel_release():
    assert host_kind("6.6.87.2-microsoft-standard-WSL2\n") == "wsl2"
    assert host_kind("6.11.0-1016-nvidia\n") == "native"


def test_a_file_without_memavailable_names_the_fix():
    with pytest.raises(UserError, match="vllm_serving_memory_meminfo_path"):
        host_facts(meminfo="nothing here\n", kind="native")


# --- the seeds' figures --------------------------------------------------------------------


def test_rtx_spark_wsl2_the_seeds_60_gib_cache_starts():
    verdict = check_launch(FP8, wsl2_rtx_spark())
    assert verdict.ok, verdict.message
    assert FP8.vllm.kv_cache_memory_bytes == 60 * GIB
    assert verdict.need["Windows share"] == 32 * GB
    assert "OS reserve" not in verdict.need  # inside the Windows share under WSL2
    assert verdict.pool_bytes == 128 * GB
    assert verdict.message.endswith(": fits")


def test_rtx_spark_wsl2_a_64_gib_cache_is_refused_with_the_largest_that_fits():
    verdict = check_launch(with_kv(FP8, 64 * GIB), wsl2_rtx_spark())
    assert not verdict.ok
    # The seed: 60 GiB was the largest that started beside the FP8 weights with 96 GB.
    assert 60 * GIB < verdict.largest_kv_bytes < 64 * GIB
    assert f"set vllm.kv_cache_memory_bytes to {verdict.largest_kv_bytes}" in verdict.message
    assert "\n" not in verdict.message
    assert check_launch(with_kv(FP8, verdict.largest_kv_bytes), wsl2_rtx_spark()).ok


def test_a_smaller_gpu_share_is_refused_by_the_gpu_memory_check():
    # The NVIDIA app set to 80 GB (76,294 MiB): the 60 GiB cache no longer fits the GPU side.
    facts = fixture_facts("rtx-spark-wsl2", "wsl2", gpu_total="76294\n")
    verdict = check_launch(FP8, facts)
    assert not verdict.ok
    assert verdict.problems == [
        "GPU memory 80.0 GB less the launch's 88.9 GB leaves -8.9 GB, under the 4.0 GB margin"
    ]


def test_four_bit_model_needs_a_little_over_60_gb_for_the_gpu():
    verdict = check_launch(FOUR_BIT, wsl2_rtx_spark())
    assert verdict.ok, verdict.message
    weights_and_cache = verdict.need["weights"] + verdict.need["KV cache"]
    # "about 7 GB for the model and 54 GB for the KV cache" (GiB on the profile: 7 + 54).
    assert 60 * GB < weights_and_cache < 70 * GB
    assert verdict.need["KV cache"] == 54 * GIB


def test_dgx_spark_leaves_the_second_seeds_112_gb_for_vllm():
    facts = HostFacts(kind="native", mem_total_bytes=128 * GB, mem_available_bytes=125 * GB)
    verdict = check_launch(FP8, facts)
    # Room for weights + KV cache + activations: 128 - 12 (the seed's reserve) - 4 margin.
    room = (
        verdict.largest_kv_bytes
        + verdict.need["weights"]
        + verdict.need["activations and CUDA graphs"]
    )
    assert abs(room - 0.88 * 128 * GB) < 1 * GB, room / GB
    assert verdict.need["OS reserve"] == 12 * GB


def test_the_seeds_70b_fp8_row_gets_its_sequences_through_plan_memory():
    # Llama-3.3-70B FP8: 70 GB of weights on a 128 GB DGX Spark, 8k tokens per sequence.
    profile = FP8.model_copy(
        update={"weights_gib": 70 * GB / GIB, "hf_config": LLAMA_70B, "name": "llama70b-fp8"}
    )
    profile = with_kv(profile, 60 * GIB)
    facts = HostFacts(kind="native", mem_total_bytes=128 * GB, mem_available_bytes=125 * GB)
    verdict = check_launch(profile, facts, seqs=32)
    assert not verdict.ok
    # 128 - 12 reserve - 4 margin - 70 weights - 10 activations = 32 GB.
    assert abs(verdict.largest_kv_bytes - 32 * GB) < 2 * MIB
    expected = plan_memory(
        LLAMA_70B,
        kv_dtype="fp8",
        memory_gb=70 + verdict.largest_kv_bytes / GB,
        weights_gb=70,
        seqs=32,
        context=8192,
    )
    assert round(expected.kv_mb_per_token, 2) == 0.16  # the seed table's figure
    assert verdict.serves == {
        "seqs": expected.seqs_at_context,
        "context": 8192,
        "usable_context_at_seqs": expected.usable_ctx_per_seq,
        "at_seqs": 32,
    }
    assert f"holds {expected.seqs_at_context:,} sequences x 8,192 tokens" in verdict.message


# --- the host as it is now -----------------------------------------------------------------


def busy_apps() -> str:
    return (FIXTURES / "dgx-spark-busy" / "compute-apps").read_text()


def test_busy_dgx_spark_is_refused_naming_the_other_gpu_processes():
    facts = fixture_facts("dgx-spark-busy", "native", apps=busy_apps(), gpu_total="[N/A]")
    verdict = check_launch(FP8, facts, host="spark-1")
    assert not verdict.ok
    assert verdict.need["other GPU processes"] == (20480 + 1536) * MIB
    assert "available memory" in verdict.message
    assert "48213 VLLM::EngineCore" in verdict.message
    # The tightest check is what is available now: 84,117,632 kB.
    available = 84_117_632 * 1024
    fixed = verdict.need["weights"] + verdict.need["activations and CUDA graphs"]
    assert verdict.largest_kv_bytes == (available - fixed - 4 * GB) // MIB * MIB
    assert verdict.message.startswith("spark-1: gb10-gemma4-12b-fp8 needs weights")


def test_this_stacks_own_vllm_is_not_counted_against_a_redeploy():
    facts = fixture_facts(
        "dgx-spark-busy", "native", apps=busy_apps(), gpu_total="[N/A]", own=[48213]
    )
    verdict = check_launch(FP8, facts)
    assert verdict.need["other GPU processes"] == 1536 * MIB
    assert verdict.ok, verdict.message


def test_own_vllm_with_unreported_memory_leaves_the_now_check_to_the_start():
    apps = "48213, VLLM::EngineCore, [N/A]\n"
    facts = fixture_facts("dgx-spark-busy", "native", apps=apps, gpu_total="[N/A]", own=[48213])
    verdict = check_launch(FP8, facts)
    assert verdict.ok, verdict.message
    assert verdict.message.endswith("memory-guard.sh checks it when the new one starts)")
    # Someone else's process with unreported memory does not switch the check off.
    other = fixture_facts("dgx-spark-busy", "native", apps=apps, gpu_total="[N/A]")
    assert not check_launch(FP8, other).ok


def test_wsl2_with_little_linux_memory_left_is_refused():
    total = (FIXTURES / "rtx-spark-wsl2" / "gpu-memory-total").read_text()
    facts = fixture_facts("rtx-spark-wsl2-low", "wsl2", gpu_total=total)
    verdict = check_launch(FP8, facts)
    assert not verdict.ok
    assert "WSL2's Linux side has 5.3 GB available, under 8 GB" in verdict.message
    # The launch itself fits the GPU: the fix is the Linux side's memory, not the cache.
    assert verdict.message.endswith(
        "Fix: close programs in Windows and WSL, or give WSL more memory in .wslconfig"
    )
    assert "kv_cache_memory_bytes" not in verdict.message


def test_a_config_the_planner_cannot_read_leaves_the_verdict_without_a_quote():
    facts = HostFacts(kind="native", mem_total_bytes=128 * GB, mem_available_bytes=125 * GB)
    verdict = check_launch(with_kv(FP8, 100 * GIB), facts, hf_config={"model_type": "x"})
    assert not verdict.ok and verdict.serves is None
    assert "set vllm.kv_cache_memory_bytes to" in verdict.message


def test_settings_move_the_bar():
    facts = wsl2_rtx_spark()
    assert not check_launch(FP8, facts, GuardSettings(windows_share_gb=40)).ok
    assert check_launch(with_kv(FP8, 64 * GIB), facts, GuardSettings(margin_gb=1)).ok


def test_start_bars():
    settings = GuardSettings()
    native = start_bar_bytes(FP8, settings, "native")
    assert native == int(13.5 * GIB) + 60 * GIB + 10 * GB + 4 * GB
    assert start_bar_bytes(FP8, settings, "wsl2") == 8 * GB
    cpu = load_profile("cpu-tiny")
    assert start_bar_bytes(cpu, settings, "native") == int(0.01 * GIB) + 1 * GIB + 1 * GB + 4 * GB


# --- the command ---------------------------------------------------------------------------


def run_cli(*args: str, fixture_dir: str = "") -> subprocess.CompletedProcess[str]:
    """`sparkops plan guard` through the shared runner: within 60 s, no traceback."""
    env = {**os.environ, "SPARKOPS_FIXTURE_DIR": str(FIXTURES / fixture_dir)}
    return sparkops("plan", "guard", *args, limit=60, env=env)


def test_cli_refuses_with_one_line_and_exit_2():
    done = run_cli(
        "--meminfo",
        str(FIXTURES / "dgx-spark-busy.meminfo"),
        "--host-kind",
        "native",
        "--nvidia-smi",
        str(FIXTURES / "nvidia-smi"),
        fixture_dir="dgx-spark-busy",
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkops: error: this host: ")
    assert (
        "48213 VLLM::EngineCore" in lines[0] and "Fix: set vllm.kv_cache_memory_bytes" in lines[0]
    )


def test_cli_json_on_an_rtx_spark():
    done = run_cli(
        "--meminfo",
        str(FIXTURES / "rtx-spark-wsl2.meminfo"),
        "--host-kind",
        "wsl2",
        "--nvidia-smi",
        str(FIXTURES / "nvidia-smi"),
        "--json",
        fixture_dir="rtx-spark-wsl2",
    )
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["ok"] and verdict["kind"] == "wsl2"
    assert verdict["need"]["Windows share"] == 32 * GB
    assert 60 * GIB < verdict["largest_kv_bytes"] < 64 * GIB


def test_cli_without_nvidia_smi_and_with_a_missing_file():
    done = run_cli("--meminfo", "/nonexistent/meminfo", "--nvidia-smi", "/nonexistent/smi")
    assert done.returncode == 2
    assert done.stderr.startswith("sparkops: error: cannot read memory file /nonexistent/meminfo")
