"""Shared-prefix memory plan, shipped shapes and the decode ceiling, worked out by hand."""

from __future__ import annotations

import argparse
import json

import pytest

from sparkops.errors import UserError
from sparkops.plan import cli
from sparkops.plan.decode import decode_ceiling
from sparkops.plan.memory import GIB, plan_memory
from sparkops.plan.prefix import CallMix, plan_shared_prefix
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


def test_the_seeds_setting_block_by_block_as_vllm_allocates_it():
    """1,000 calls of 1,600 tokens, 90% shared, 125 written, in a 60 GiB FP8 cache: five
    sliding groups of 16-token blocks holding only their 1,024-token window, one full group
    of 64-token blocks, one pool of 122,880 blocks (the H200's served figures)."""
    shape = shipped_shape(GEMMA4)
    plan = plan_shared_prefix(
        shape,
        CallMix(seqs=1000, prompt_tokens=1600, shared_fraction=0.9, output_tokens=125),
        width=1,
        kv_cache_bytes=SEED_KV,
    )
    assert plan.group_blocks == (16,) * 5 + (64,) and plan.pool_blocks == 122_880
    # 1,440 shared tokens -> 1,408 in whole 64-token hit blocks; 192 own prompt tokens per call
    assert (plan.shared_tokens, plan.own_prompt_tokens, plan.block_size) == (1408, 192, 64)
    # at full length (1,725 tokens) a sliding group holds blocks 44..107 of which 0..87 are
    # shared: 20 own; the full group ceil(1725/64) - 22 = 5; 5 x 20 + 5 = 105
    assert plan.own_blocks_peak == 105
    # the shared blocks the running calls reference, at the typical length 1,662: a sliding
    # group's window starts at block (1662 - 1023) // 16 = 39, so 88 - 39 = 49; full: 22
    assert plan.shared_blocks == 5 * 49 + 22
    # at the prompt alone (1,600 tokens): 5 x (100 - 88) + (25 - 22) = 63 own blocks; the mean
    # over the answer lies between that and the full length
    assert 63 < plan.own_blocks_typical < 105
    assert plan.usage_typical == pytest.approx((267 + 1000 * plan.own_blocks_typical) / 122_880)
    assert plan.usage_typical < plan.usage_peak < plan.usage_full_answers
    assert plan.usage_full_answers == pytest.approx((267 + 1000 * 105) / 122_880)
    assert plan.warnings == ()
    # the whole-context view of the same setting: every sequence charged 1,725 tokens
    worst = shape.sequence_bytes(1725, 1) * 1000 / SEED_KV
    assert worst > 2.5


# What vLLM 0.26 reported on the H200 (benchmarks/README.md, 2026-12-03 and 2026-12-01):
# (in flight, prompt tokens, shared tokens, written, prefixes, KV mean, KV peak)
MEASURED_GEMMA4 = [(1, 1521, 1330, 125, 3, 0.003, 0.003), (240, 1521, 1330, 125, 3, 0.177, 0.201),
                   (960, 1521, 1330, 125, 3, 0.759, 0.812)]  # fmt: skip
# the Llama-8B-shaped sweep: the 3-step sample pipeline, calls of ~1,538 tokens, 91.9% hit,
# 8 written, KV max 3% / 6% / 13%; 983,040 tokens of 16 (61,440 blocks)
MEASURED_LLAMA = [(240, 0.03), (480, 0.06), (960, 0.13)]


@pytest.mark.parametrize(("seqs", "prompt", "shared", "out", "prefixes", "mean", "peak"),
                         MEASURED_GEMMA4)  # fmt: skip
def test_the_plan_is_within_ten_points_of_what_the_engine_held(
    seqs, prompt, shared, out, prefixes, mean, peak
):
    """Issue 30's acceptance: typical and peak within 10 points of vLLM's own KV usage at
    each level measured, and the preemption verdict right (none preempted)."""
    plan = plan_shared_prefix(
        shipped_shape(GEMMA4),
        CallMix(seqs, prompt, shared / prompt, out, prefixes),
        width=1,
        kv_cache_bytes=60 * GIB,
    )
    assert abs(plan.usage_typical - mean) < 0.10, plan.usage_typical
    assert abs(plan.usage_peak - peak) < 0.10, plan.usage_peak
    assert plan.warnings == () and plan.seqs_that_fit_peak >= seqs


@pytest.mark.parametrize(("seqs", "kv_max"), MEASURED_LLAMA)
def test_the_llama_rows_are_within_twelve_points(seqs, kv_max):
    plan = plan_shared_prefix(
        shipped_shape("/tmp/w/model"),
        CallMix(seqs, prompt_tokens=1538, shared_fraction=0.919, output_tokens=8, prefixes=3),
        width=1,
        kv_cache_bytes=60 * GIB,
    )
    assert plan.pool_blocks == 61_440 and plan.group_blocks == (16,)
    assert abs(plan.usage_peak - kv_max) < 0.12 and plan.warnings == ()


def test_too_many_sequences_warn_without_fp8_advice_when_already_fp8():
    shape = shipped_shape(GEMMA4)
    calls = CallMix(seqs=1000, prompt_tokens=1600, shared_fraction=0.9, output_tokens=125)
    fp8 = plan_shared_prefix(shape, calls, width=1, kv_cache_bytes=10 * GIB)
    assert fp8.seqs_that_fit_peak < 1000
    assert "preempt" in fp8.warnings[0] and "fp8" not in fp8.warnings[0]
    bf16 = plan_shared_prefix(shape, calls, width=2, kv_cache_bytes=10 * GIB, kv_dtype="bf16")
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
    assert out["pool_blocks"] == 122_880 and out["own_blocks_peak"] == 105
    assert out["usage_typical"] < out["usage_peak"] < 1.0 and out["warnings"] == []
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
            CallMix(seqs=1, prompt_tokens=10, shared_fraction=1.5, output_tokens=1),
            width=1,
            kv_cache_bytes=SEED_KV,
        )
    with pytest.raises(SystemExit):  # --config and --profile are one choice
        run(["plan", "decode", "--context", "9"])
