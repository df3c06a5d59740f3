"""One meaning per token flag across `sparkops plan`: per record and per call are named, the
old ambiguous `--prompt-tokens` is refused with the names, the notes' "about 2.4 calls per
record" can be entered, and each planner prints its formula and the notes' figure beside its
own."""

from __future__ import annotations

import json
import os

import pytest

from tests.plugins.cli import sparkops

SEED = ("--computed-tok-s", "2580", "--hit-rate", "88.7%")
NO_COLUMNS = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # piped: rows stay whole


@pytest.mark.parametrize(
    ("planner", "flag", "instead"),
    [
        ("throughput", "--prompt-tokens", "--prompt-tokens-per-record (or -per-call)"),
        ("throughput", "--gen-tokens", "--gen-tokens-per-record (or -per-call)"),
        ("memory", "--prompt-tokens", "--prompt-tokens-per-call"),
        ("memory", "--output-tokens", "--gen-tokens-per-call"),
    ],
)
def test_an_ambiguous_token_flag_is_refused_with_the_explicit_names(planner, flag, instead):
    extra = SEED if planner == "throughput" else ("--profile", "gb10-gemma4-12b-fp8")
    done = sparkops("plan", planner, *extra, flag, "1600", timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        f"sparkops plan {planner}: error: {flag} is ambiguous (per record or per call?): use "
        f"{instead}; every `sparkops plan` token flag names its unit"
    )


def test_the_notes_per_call_figures_and_calls_per_record() -> None:
    per_call = ("--prompt-tokens-per-call", "1600", "--gen-tokens-per-call", "125")
    done = sparkops("plan", "throughput", *SEED, *per_call, "--calls-per-record", "2.4",
                    "--json", timeout=120)  # fmt: skip
    out = json.loads(done.stdout)
    assert (out["prompt_tokens"], out["gen_tokens"]) == pytest.approx((3840, 300))
    assert round(out["records_per_min"], 1) == 210.9  # not 525.6: per call read per record
    assert out["per_call"] == (
        "1,600 x 2.4 calls = 3,840 prompt tokens a record; 125 x 2.4 calls = 300 gen tokens "
        "a record"
    )
    missing = sparkops("plan", "throughput", *SEED, *per_call, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "sparkops: error: per-call tokens need --calls-per-record N (the average calls a "
        "record makes; the benchmark notes: about 2.4), or give --prompt-tokens-per-record "
        "and --gen-tokens-per-record"
    )


def test_throughput_prints_its_formula_and_the_notes_figures_beside_its_own() -> None:
    per_record = ("--prompt-tokens-per-record", "3600", "--gen-tokens-per-record", "300")
    done = sparkops("plan", "throughput", *SEED, *per_record, "--records", "500000",
                    timeout=120, env=NO_COLUMNS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [" ".join(line.replace("│", " ").split()) for line in done.stdout.splitlines()]
    assert "records / min 219.0 ~217" in rows
    assert "hours for 500,000 records 38.0 (1.59 days) ~1.7 days (at 217/min: 1.60)" in rows
    assert (
        "Formula: computed = P x (1 - H) + G = 3,600 x (1 - 88.7%) + 300 = 707 tokens a "
        "record; records/min = computed tok/s x 60 / computed = 2,580 x 60 / 707 = 219.0; "
        "effective tok/s = records/min x (P + G) / 60 = 14,236; ceiling (H = 1) = computed "
        "tok/s x 60 / G = 516.0 records/min."
    ) in done.stdout


def test_memory_and_guard_print_their_formula_and_the_notes_figure() -> None:
    memory = sparkops("plan", "memory", "--profile", "gb10-gemma4-12b-fp8", "--seqs", "1000",
                      "--prompt-tokens-per-call", "1600", "--shared", "90%",
                      "--gen-tokens-per-call", "125", timeout=120, env=NO_COLUMNS)  # fmt: skip
    assert memory.returncode == 0, memory.stderr
    assert (
        "Formula: usage = (shared blocks + in flight x own blocks) / blocks = (267 + 1,000 x "
        "86.4) / 122,880 = 70.5% typical"
    ) in memory.stdout
    assert "75.9% mean, 81.2% peak, no preemption" in memory.stdout
    assert "The seed's GB10 (vLLM 0.32) read about 55%" in memory.stdout
    guard = sparkops("plan", "guard", "--nvidia-smi", "false", "--total-gb", "128",
                     timeout=120, env=NO_COLUMNS)  # fmt: skip
    assert guard.returncode == 0, guard.stderr
    assert "a 60 GiB KV cache started beside the FP8 weights and 64 GiB did not" in guard.stdout


def test_memory_by_config_prints_its_formula(tmp_path) -> None:
    config = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8}
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 4096}))
    done = sparkops("plan", "memory", "--config", str(tmp_path), "--weights-gb", "16",
                    timeout=120, env=NO_COLUMNS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "Formula: KV bytes a token = 2 (K, V) x layers x KV heads x head dim x dtype bytes = "
        "65,536; KV cache = memory - weights = 112.64 - 16.00 GB; tokens that fit = KV cache / "
        "KV bytes a token = 1,474,609."
    ) in done.stdout
