"""Shared-prefix memory plan, shipped shapes and the decode ceiling, worked out by hand."""

from __future__ import annotations

import argparse
import json

import pytest

from sparkops.errors import UserError
from sparkops.plan import cli
from sparkops.plan.decode import decode_ceiling
from sparkops.plan.memory import GIB, plan_memory
from sparkops.plan.prefix import plan_shared_prefix
from sparkops.plan.shapes import SHAPES_FILE, profile_shape, shape_from_config, shipped_shape
from sparkops.profiles import available_profiles, load_profile

GEMMA4 = "RedHatAI/gemma-4-12B-it-FP8-dynamic"
SEED_KV = 64_424_509_440  # the seed's 60 GiB --kv-cache-memory-bytes


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sparkops")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_every_shipped_gb10_profile_has_a_shape_with_a_source():
    for name in available_profiles():
        profile = load_profile(name)
        shape = shipped_shape(profile.model)
        assert shape is not None, name
        assert shape.source, name
    assert "google/gemma-4-12B-it config.json" in SHAPES_FILE.read_text()


def test_gemma4_bytes_per_token_by_hand():
    shape = shipped_shape(GEMMA4)
    # 40 sliding layers x K,V x 8 heads x 256 + 8 global layers x K,V x 1 head x 512 (K = V in
    # the model, but vLLM stores both: served 2026-12-03, benchmarks/README.md)
    assert shape.bytes_per_token(1) == 40 * 2 * 8 * 256 + 8 * 2 * 512 == 172_032
    # a 2,000-token sequence: sliding layers hold their 1,024-token window
    assert shape.sequence_bytes(2000, 1) == 163_840 * 1024 + 8192 * 2000


def test_the_seeds_setting_is_near_its_measured_55_percent_not_hundreds():
    shape = shipped_shape(GEMMA4)
    plan = plan_shared_prefix(
        shape,
        width=1,
        kv_cache_bytes=SEED_KV,
        seqs=1000,
        prompt_tokens=1600,
        shared_fraction=0.9,
        output_tokens=125,
    )
    # 1,440 shared tokens -> 1,408 in whole 64-token blocks; 192 own prompt tokens per call
    assert (plan.shared_tokens, plan.own_prompt_tokens) == (1408, 192)
    # typical: 192 + 62 -> 256 tokens (4 blocks) per sequence; peak: 192 + 125 -> 320 (5 blocks)
    assert plan.seq_bytes_typical == 256 * 172_032
    assert plan.seq_bytes_peak == 320 * 172_032
    shared = 163_840 * 1024 + 8192 * 1408
    assert plan.usage_typical == pytest.approx((shared + 1000 * 256 * 172_032) / SEED_KV)
    assert 0.5 < plan.usage_typical < 0.7 and plan.usage_peak < 0.9
    assert plan.warnings == ()
    # the whole-context view of the same setting: every sequence charged 1,725 tokens
    worst = shape.sequence_bytes(1725, 1) * 1000 / SEED_KV
    assert worst > 2.5


def test_too_many_sequences_warn_without_fp8_advice_when_already_fp8():
    shape = shipped_shape(GEMMA4)
    args = dict(kv_cache_bytes=10 * GIB, seqs=1000, prompt_tokens=1600, shared_fraction=0.9)
    fp8 = plan_shared_prefix(shape, width=1, output_tokens=125, **args)
    assert fp8.seqs_that_fit_peak < 1000
    assert "preempt" in fp8.warnings[0] and "fp8" not in fp8.warnings[0]
    bf16 = plan_shared_prefix(shape, width=2, output_tokens=125, kv_dtype="bf16", **args)
    assert "use an fp8 KV cache" in bf16.warnings[0]


def test_context_plan_drops_the_fp8_advice_when_already_fp8():
    llama = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
    }
    args = dict(memory_gb=20, weights_gb=16, seqs=64, context=8192)
    assert "fp8" not in plan_memory(llama, kv_dtype="fp8", **args).warnings[0]
    assert "use an fp8 KV cache" in plan_memory(llama, kv_dtype="bf16", **args).warnings[0]


def test_shape_from_config_matches_plan_memory():
    gemma3 = {
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    }
    shape = shape_from_config(gemma3)
    assert shape.bytes_per_token(1) == 48 * 2 * 8 * 256
    assert shape.sequence_bytes(8192, 1) == 4096 * (8 * 8192 + 40 * 1024)


def test_decode_ceiling_by_hand_and_where_it_flattens():
    shape = shipped_shape(GEMMA4)
    c = decode_ceiling(shape, width=1, context=1662, bandwidth_gb_s=273, levels=(1, 240, 960))
    kv = 163_840 * 1024 + 8192 * 1662
    assert c.kv_read_bytes_per_seq == kv
    assert c.asymptote_tok_s == pytest.approx(273e9 / kv)
    assert c.knee_concurrency == pytest.approx(12e9 / kv)
    at = {p.concurrency: p.tok_s for p in c.points}
    assert at[1] == pytest.approx(273e9 / (12e9 + kv))
    assert at[960] == pytest.approx(960 * 273e9 / (12e9 + 960 * kv))
    # the seed's flat stretch: 240 -> 960 in flight buys about 20% more decode, 1 -> 240 55x
    assert at[960] / at[240] < 1.25 and at[240] / at[1] > 50
    assert c.near_asymptote_concurrency == pytest.approx(9 * c.knee_concurrency)


def test_cli_memory_and_decode_by_profile(capsys):
    argv = ["plan", "memory", "--profile", "gb10-gemma4-12b-fp8", "--seqs", "1000"]
    argv += ["--prompt-tokens-per-call", "1600", "--shared", "90%", "--gen-tokens-per-call", "125"]
    argv += ["--json"]
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_cache_bytes"] == SEED_KV and out["shared_tokens"] == 1408
    assert 0.5 < out["usage_typical"] < 0.7
    argv = ["plan", "decode", "--profile", "gb10-gemma4-12b-fp8", "--context", "1662"]
    assert run(argv) == 0
    text = capsys.readouterr().out
    assert "the asymptote is 1,505 tok/s" in text and "90% at 595" in text


def test_cli_profile_without_a_shape_and_bad_inputs(tmp_path):
    profile = load_profile("gb10-llama31-8b-fp8").model_dump()
    profile["model"] = "someone/unknown-model"
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(profile))
    with pytest.raises(UserError, match=r"ships no shape .* pass the model's config\.json"):
        profile_shape(str(path))
    with pytest.raises(UserError, match="--shared"):
        plan_shared_prefix(
            shipped_shape(GEMMA4),
            width=1,
            kv_cache_bytes=SEED_KV,
            seqs=1,
            prompt_tokens=10,
            shared_fraction=1.5,
            output_tokens=1,
        )
    with pytest.raises(SystemExit):  # --config and --profile are one choice
        run(["plan", "decode", "--context", "9"])
