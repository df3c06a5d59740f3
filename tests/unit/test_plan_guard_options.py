"""`sparkops plan guard`'s figure options reach the verdict: each --x-gb is read into
GuardSettings by field name (plan.guard.settings_of), so a renamed option or field fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "memory"
GB = 1_000_000_000


def guard(meminfo: str, kind: str) -> dict:
    argv = [
        sys.executable, "-m", "sparkops.cli", "plan", "guard",
        "--meminfo", str(FIXTURES / meminfo), "--host-kind", kind, "--nvidia-smi", "false",
        "--total-gb", "120", "--os-reserve-gb", "11", "--windows-share-gb", "30",
        "--activations-gb", "9", "--margin-gb", "5", "--wsl-linux-gb", "7", "--json",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode in (0, 2), done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("meminfo", "kind", "reserve"),
    [
        ("dgx-spark.meminfo", "native", "OS reserve"),
        ("rtx-spark-wsl2.meminfo", "wsl2", "Windows share"),
    ],
)
def test_every_figure_option_reaches_the_verdict(meminfo, kind, reserve):
    verdict = guard(meminfo, kind)
    assert verdict["kind"] == kind
    assert verdict["pool_bytes"] == 120 * GB
    assert verdict["margin_bytes"] == 5 * GB
    assert verdict["need"]["activations and CUDA graphs"] == 9 * GB
    assert verdict["need"][reserve] == (11 if kind == "native" else 30) * GB
