"""Planners refuse figures no machine can have before computing anything (issue 37 item 13).

`plan memory --kv-cache-gib 200` on a 128 GB Spark planned 23.5% use, `--hit-rate 0.887%` gave
40 records/min without a word, `plan decode --bandwidth-gb-s 273000` (MB/s) planned 1.4M tok/s,
and `plan guard --windows-share-gb 200` of 128 told the user to quantise. Each case runs the
real command line and checks what the user reads: exit 2, nothing on stdout, one line on stderr
naming the problem and the fix. The controls show the same commands with sound figures plan.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkops.cli import main
from sparkops.errors import UserError
from sparkops.plan.guard import GuardSettings, check_launch, planned_facts
from sparkops.profiles import load_profile

GEMMA = ("--profile", "gb10-gemma4-12b-fp8")
CONFIG = Path(__file__).parents[1] / "fixtures" / "gemma4-12b"
SEED = ("--computed-tok-s", "2580", "--prompt-tokens-per-record", "3600",
        "--gen-tokens-per-record", "300")  # fmt: skip
GUARD_128 = ("--nvidia-smi", "false", "--total-gb", "128")


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line a refused `sparkops ARGV` printed (exit 2, nothing on stdout)."""
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("sparkops: error: ")
    return line.removeprefix("sparkops: error: ")


def planned(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    """The JSON plan of `sparkops ARGV --json`, which must succeed."""
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


# --- the four cases of the issue -------------------------------------------------------------


def test_a_kv_cache_larger_than_the_machine_is_refused_with_the_largest_that_fits(capsys):
    line = refused(capsys, "plan", "memory", *GEMMA, "--kv-cache-gib", "200")
    assert line == (
        "--kv-cache-gib 200 (200 GiB = 214.7 GB) and the weights (12.0 GB) are more than the "
        "112.6 GB vLLM gets (--memory-gb; default 0.88 x 128 GB of a GB10): give --kv-cache-gib "
        "93.7 or less, or --memory-gb of a machine that has more"
    )
    fits = planned(capsys, "plan", "memory", *GEMMA, "--kv-cache-gib", "93.7")
    assert fits["kv_cache_bytes"] == int(93.7 * (1 << 30))


def test_a_fraction_with_a_percent_sign_is_refused_with_the_percent_meant(capsys):
    line = refused(capsys, "plan", "throughput", *SEED, "--hit-rate", "0.887%")
    assert line == (
        "--hit-rate 0.887% is a hit rate of 0.00887: did you mean 88.7%? A % sign makes the "
        "number a percent; write 88.7% (or 0.887), or 0.00887 if it really is under 1%"
    )
    # The way out for a rate that really is under 1%, and the forms that mean 88.7%.
    assert planned(capsys, "plan", "throughput", *SEED, "--hit-rate", "0.00887")[
        "hit_rate"
    ] == pytest.approx(0.00887)
    for text in ("88.7%", "88.7", "0.887"):
        plan = planned(capsys, "plan", "throughput", *SEED, "--hit-rate", text)
        assert round(plan["records_per_min"], 1) == 219.0


def test_a_bandwidth_in_mb_per_second_is_refused_naming_the_unit(capsys):
    line = refused(capsys, "plan", "decode", *GEMMA, "--context", "2000",
                   "--bandwidth-gb-s", "273000")  # fmt: skip
    assert line == (
        "--bandwidth-gb-s 273,000 is not a memory bandwidth any machine has: did you give "
        "MB/s? 273,000 MB/s is 273 GB/s. Give GB/s, above 0 and at most 10,000 (a GB10 273, "
        "an H200 4,800), or leave it out and name the machine with --machine"
    )
    plan = planned(capsys, "plan", "decode", *GEMMA, "--context", "2000", "--bandwidth-gb-s", "273")
    assert plan["asymptote_tok_s"] < 2000


def test_a_windows_share_larger_than_the_laptop_is_refused_not_sent_to_quantise(capsys):
    line = refused(capsys, "plan", "guard", *GEMMA, *GUARD_128, "--host-kind", "wsl2",
                   "--windows-share-gb", "200")  # fmt: skip
    assert line == (
        "the Windows share 200 GB (--windows-share-gb, vllm_serving_memory_windows_share_gb) is "
        "not less than the host's 128 GB: it is what Windows and WSL2's Linux keep, ~32 GB on a "
        "128 GB RTX Spark whose GPU has 96 GB; give decimal GB, well under the host's memory"
    )
    assert "quantised" not in line
    ok = planned(capsys, "plan", "guard", *GEMMA, *GUARD_128, "--host-kind", "wsl2",
                 "--windows-share-gb", "32")  # fmt: skip
    assert ok["ok"] is True


def test_the_deploy_s_guard_refuses_the_same_share(tmp_path):
    """check_launch is what `deploy.yml` runs (the sparkops_memory_guard filter): an inventory
    share larger than the machine is refused there too, before the sum."""
    profile = load_profile("gb10-gemma4-12b-fp8")
    with pytest.raises(UserError, match=r"^the Windows share 200 GB .* is not less than"):
        check_launch(profile, planned_facts("wsl2", 128), GuardSettings(windows_share_gb=200))
    with pytest.raises(UserError, match=r"^the host's memory 256 GB .* more than a GB10 has"):
        check_launch(profile, planned_facts("native", 256), GuardSettings(total_gb=256))
    assert check_launch(profile, planned_facts("wsl2", 128), GuardSettings()).ok


# --- the same class of mistake in the other options ------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ("plan", "memory", *GEMMA, "--memory-gb", "112640"),
            "--memory-gb 112,640 GB is more than a GB10 has (128 GB); did you give MB? 112,640 "
            "MB is 112.6 GB: give decimal GB, at most 128",
        ),
        (
            ("plan", "memory", *GEMMA, "--weights-gb", "-3"),
            "--weights-gb -3 is below 0: give 0 GB or more",
        ),
        (
            ("plan", "memory", *GEMMA, "--weights-gb", "110"),
            "profile gb10-gemma4-12b-fp8's KV cache (60 GiB = 64.4 GB) and the weights (110.0 "
            "GB) are more than the 112.6 GB vLLM gets (--memory-gb; default 0.88 x 128 GB of a "
            "GB10): give --kv-cache-gib 2.4 or less, or --memory-gb of a machine that has more",
        ),
        (
            ("plan", "memory", *GEMMA, "--prompt-tokens-per-call", "0"),
            "--prompt-tokens-per-call 0 is below 1: give 1 token or more",
        ),
        (
            ("plan", "memory", *GEMMA, "--prompt-tokens-per-call", "1600", "--shared", "0.9%"),
            "--shared 0.9% is a shared share of 0.009: did you mean 90%? A % sign makes the "
            "number a percent; write 90% (or 0.9), or 0.009 if it really is under 1%",
        ),
        (
            ("plan", "memory", *GEMMA, "--kv-cache-gib", "nan"),
            "--kv-cache-gib nan is not a number above 0: give the KV cache's size in GiB",
        ),
        (
            ("plan", "throughput", *SEED, "--hit-rate", "188"),
            "--hit-rate 188 is above 100%: give a hit rate of 0..100%, e.g. 88.7%",
        ),
        (
            ("plan", "throughput", *SEED, "--hit-rate", "88%", "--points", "-3"),
            "--points -3 is below 0: give 0 points or more",
        ),
        (
            (
                "plan",
                "throughput",
                "--computed-tok-s",
                "2580",
                "--hit-rate",
                "88%",
                "--prompt-tokens-per-call",
                "-1600",
                "--gen-tokens-per-call",
                "125",
                "--calls-per-record",
                "2.4",
            ),
            "--prompt-tokens-per-call -1600 is below 0: give 0 tokens or more",
        ),
        (
            ("plan", "throughput", *SEED[2:], "--computed-tok-s", "inf", "--hit-rate", "88%"),
            "--computed-tok-s inf is not a number above 0: give the prompt+generation tok/s "
            "the server computes at full load (e.g. from a sweep)",
        ),
        (
            ("plan", "decode", *GEMMA, "--context", "2000", "--weights-gb", "500"),
            "--weights-gb 500 GB is more than a GB10 has (128 GB): give decimal GB, at most 128",
        ),
        (
            (
                "plan",
                "decode",
                *GEMMA,
                "--context",
                "2000",
                "--machine",
                "h200",
                "--weights-gb",
                "14500",
            ),
            "--weights-gb 14,500 GB is more than an H200 has (141 GB); did you give MB? 14,500 "
            "MB is 14.5 GB: give decimal GB, at most 141",
        ),
        (
            ("plan", "guard", *GEMMA, "--nvidia-smi", "false", "--total-gb", "128000"),
            "--total-gb 128,000 GB is more than one host has (4,096 GB); did you give MB? "
            "128,000 MB is 128 GB: give decimal GB, at most 4,096",
        ),
        (
            ("plan", "guard", *GEMMA, "--nvidia-smi", "false", "--total-gb", "256"),
            "the host's memory 256 GB (--total-gb, vllm_serving_memory_total_gb) is more than "
            "a GB10 has (128 GB; an RTX Spark 64 or 128): give its decimal GB, 128 or 64",
        ),
        (
            ("plan", "guard", *GEMMA, *GUARD_128, "--margin-gb", "-4"),
            "--margin-gb -4 is below 0: give 0 GB or more",
        ),
        (
            ("plan", "guard", *GEMMA, *GUARD_128, "--os-reserve-gb", "120", "--margin-gb", "8"),
            "the OS reserve 120 GB and the margin 8 GB leave nothing of the host's 128 GB for "
            "vLLM: lower them (--os-reserve-gb, vllm_serving_memory_os_reserve_gb; --margin-gb, "
            "vllm_serving_memory_margin_gb)",
        ),
        (
            ("plan", "guard", *GEMMA, *GUARD_128, "--seqs", "0"),
            "--seqs 0 is below 1: give 1 sequence or more",
        ),
    ],
    ids=lambda v: " ".join(v[:1] + v[3:]) if isinstance(v, tuple) else None,
)
def test_each_impossible_figure_is_refused_with_its_fix(capsys, argv, expected):
    assert refused(capsys, *argv) == expected


def test_sound_figures_beside_them_still_plan(capsys):
    """Controls: a larger machine given explicitly, a model split over two Sparks, a 64 GB
    RTX Spark, and a reserve as large as the host allows."""
    # --config plans for any one host: 300 GB given to vLLM holds a 200 GiB cache
    big = planned(capsys, "plan", "memory", "--config", str(CONFIG), "--weights-gb", "24",
                  "--memory-gb", "300", "--kv-cache-gib", "200")  # fmt: skip
    assert big["kv_cache_bytes"] == 200 * (1 << 30)
    # the 72B pair profile: weights larger than one Spark, each Spark's own 24 GiB cache
    pair = planned(capsys, "plan", "memory", "--profile", "gb10-qwen25-72b-bf16")
    assert pair["kv_cache_bytes"] == 24 * (1 << 30)
    small = planned(capsys, "plan", "guard", "--profile", "gb10-gemma4-12b-fp8-64gb",
                    "--nvidia-smi", "false", "--total-gb", "64", "--host-kind", "wsl2",
                    "--windows-share-gb", "16")  # fmt: skip
    assert small["ok"] is True
    assert main(["plan", "guard", *GEMMA, *GUARD_128, "--os-reserve-gb", "20", "--json"]) == 0
