"""`sparkops plan guard` off the target and on a 64 GB RTX Spark: a controller's own memory is
never read as a Spark's (it says "run this on the Spark", or plans the size --total-gb gives),
and a refused launch names the bundled profile that fits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sparkops.plan.guard import GuardSettings, check_launch, planned_facts, profiles_that_fit
from sparkops.profiles import available_profiles, load_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "memory"
RTX_64 = ("--total-gb", "64", "--host-kind", "wsl2", "--windows-share-gb", "16")


def guard(*args: str) -> subprocess.CompletedProcess[str]:
    """`sparkops plan guard` on a host with no nvidia-smi (as a controller is)."""
    argv = [sys.executable, "-m", "sparkops.cli", "plan", "guard", "--nvidia-smi", "false", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in done.stderr
    return done


def test_a_controller_is_told_to_run_the_guard_on_the_spark() -> None:
    done = guard()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "sparkops: error: this host answers no nvidia-smi: it is not the GB10 that "
        "gb10-gemma4-12b-fp8 runs on, and its memory says nothing about the Spark's. Run this "
        "on the Spark (sparkops plan guard --profile gb10-gemma4-12b-fp8), or plan for one "
        "from here with --total-gb 128 (--total-gb 64 for a 64 GB RTX Spark, with --host-kind "
        "wsl2 under Windows)"
    )


def test_a_controller_plans_a_128_gb_spark_from_the_given_total() -> None:
    done = guard("--total-gb", "128")
    assert done.returncode == 0, done.stderr
    assert (
        "\na 128 GB host (--total-gb): gb10-gemma4-12b-fp8 needs weights 14.5 GB + KV cache "
        "64.4 GB + activations and CUDA graphs 10.0 GB + OS reserve 12.0 GB + other GPU "
        "processes 0.0 GB = 100.9 GB of 128.0 GB: fits\n"
    ) in done.stdout
    assert "available memory" not in done.stdout  # the controller's own memory is not read


def test_a_64_gb_rtx_spark_is_refused_the_128_gb_profile_and_told_which_fits() -> None:
    done = guard(*RTX_64)
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith("sparkops: error: a 64 GB WSL2 host (--total-gb): gb10-gemma4-12b-fp8")
    assert "Fix: set vllm.kv_cache_memory_bytes to 19503513600 (18.2 GiB) or less" in line
    assert line.endswith("; or use a bundled profile that fits here: gb10-gemma4-12b-fp8-64gb")
    fits = guard("--profile", "gb10-gemma4-12b-fp8-64gb", *RTX_64)
    assert fits.returncode == 0 and "of 64.0 GB: fits\n" in fits.stdout


def test_a_copy_of_a_sparks_meminfo_is_still_read_anywhere() -> None:
    done = guard("--meminfo", str(FIXTURES / "dgx-spark.meminfo"), "--host-kind", "native")
    assert done.returncode == 0, done.stderr
    assert "this host: gb10-gemma4-12b-fp8 needs" in done.stdout


def test_profiles_that_fit_lists_the_same_model_first() -> None:
    settings = GuardSettings(total_gb=64, windows_share_gb=16)
    facts = planned_facts("wsl2", 64)
    wanted = load_profile("gb10-gemma4-12b-fp8")
    assert not check_launch(wanted, facts, settings).ok
    bundled = [load_profile(name) for name in available_profiles()]
    names = [p.name for p in profiles_that_fit(wanted, facts, settings, bundled)]
    assert names[0] == "gb10-gemma4-12b-fp8-64gb"
    assert "cpu-tiny" not in names  # another platform
