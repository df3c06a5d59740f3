"""sparkops-gpu-check (sparkops.doctor.gpu): the verdict, --json, the exit codes, the thresholds.

The script runs for real, as a process, against tests/fixtures/bin/nvidia-smi (the one stand-in:
there is no GPU here), whose state file chooses a healthy loaded GB10, the stuck low-power state
or an idle GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sparkops.doctor import gpu

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "src" / "sparkops" / "doctor" / "gpu.py"
NVIDIA_SMI = ROOT / "tests" / "fixtures" / "bin" / "nvidia-smi"
INSTALLED = ROOT / "ansible" / "roles" / "host_tuning" / "files" / "sparkops-gpu-check"


def run_check(tmp_path: Path, state: str, *args: str, config: dict | None = None):
    """Run the script as a host would (its own python3, no package), on the fixture GPU."""
    (tmp_path / "gpu-state").write_text(state)
    config_path = tmp_path / "gpu-check.json"
    if config is not None:
        config_path.write_text(json.dumps(config))
    env = {
        "PATH": f"{NVIDIA_SMI.parent}:/usr/bin:/bin",
        "SPARKOPS_FIXTURE_GPU_STATE_FILE": str(tmp_path / "gpu-state"),
        "SPARKOPS_GPU_CHECK_CONFIG": str(config_path),
    }
    return subprocess.run(
        [sys.executable, "-I", str(SCRIPT), "--samples", "2", "--interval", "0", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("state", "rc", "verdict", "words"),
    [
        ("load", 0, "ok", "GPU power state ok: 2405 MHz and 89.7 W at 96% utilisation."),
        ("stuck", 2, "stuck", "stuck in its low-power state: 1005 MHz and 22.1 W"),
        ("idle", 3, "idle", "utilisation stayed below 80% (peak 0%)"),
    ],
)
def test_verdict_exit_code_and_json(tmp_path, state, rc, verdict, words):
    text = run_check(tmp_path, state)
    assert text.returncode == rc, text.stderr
    assert words in text.stdout and "Traceback" not in text.stderr
    as_json = run_check(tmp_path, state, "--json")
    assert as_json.returncode == rc
    result = json.loads(as_json.stdout)
    assert result["state"] == verdict and result["rc"] == rc
    assert words in result["message"]
    # Issue 16's run record reads the GPU it ran on from here.
    assert result["gpu"] == {
        "name": "NVIDIA GB10",
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "pstate": {"load": "P0", "stuck": "P0", "idle": "P8"}[state],
        "clock_max_mhz": 3003.0,
        "power_limit_w": None,  # a GB10 reports no power cap
    }
    assert result["thresholds"]["stuck_max_mhz"] == 1300.0
    assert result["samples"] == 2


def test_stuck_prints_the_cure(tmp_path):
    out = run_check(tmp_path, "stuck").stdout
    assert "charger at both ends" in out and "A reboot does not clear it" in out


def test_thresholds_come_from_the_config_file(tmp_path):
    """The one threshold: host_tuning writes it to the config, the script and preflight read it."""
    strict = {"stuck_max_mhz": 2500, "stuck_max_watts": 100, "min_util": 90}
    result = json.loads(run_check(tmp_path, "load", "--json", config=strict).stdout)
    assert result["state"] == "stuck"
    assert result["thresholds"]["stuck_max_mhz"] == 2500.0
    # An option still beats the file.
    again = run_check(tmp_path, "load", "--json", "--stuck-max-mhz", "1300", config=strict)
    assert json.loads(again.stdout)["state"] == "ok"


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ("{not json", "cannot read"),
        ('{"stuck_max_mhz": "fast"}', "every value must be a number"),
        ('{"stuck_mhz": 1300}', "unknown keys stuck_mhz"),
        ("[1300]", "must hold one JSON object"),
    ],
)
def test_a_broken_config_is_one_line_and_exit_5(tmp_path, config, words):
    (tmp_path / "gpu-check.json").write_text(config)
    proc = run_check(tmp_path, "load")
    assert proc.returncode == 5
    assert proc.stderr.startswith("sparkops-gpu-check: error: ") and words in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [["--samples", "x"], ["--samples", "0"], ["--bogus"]])
def test_a_bad_option_is_exit_5_not_the_stuck_code(tmp_path, args):
    proc = run_check(tmp_path, "load", *args)
    assert proc.returncode == 5, proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_nvidia_smi_is_exit_4(tmp_path):
    proc = run_check(tmp_path, "load", "--json", "--nvidia-smi", str(tmp_path / "absent"))
    assert proc.returncode == 4
    assert json.loads(proc.stdout)["state"] == "no-gpu"


def test_a_failing_nvidia_smi_is_exit_1_with_its_words(tmp_path):
    broken = tmp_path / "nvidia-smi"
    broken.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n"
    )
    broken.chmod(0o755)
    proc = run_check(tmp_path, "load", "--json", "--nvidia-smi", str(broken))
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["state"] == "error"
    assert "could not communicate" in result["message"]
    assert result["gpu"]["driver_version"] is None


def test_help_documents_the_exit_codes_and_defaults(tmp_path):
    proc = run_check(tmp_path, "load", "--help")
    assert proc.returncode == 0
    for line in ("0  healthy", "2  stuck", "3  not judged", "4  not judged", "5  usage"):
        assert line in proc.stdout
    assert "(default: 1300.0)" in proc.stdout


def test_load_command_runs_while_sampling(tmp_path):
    """--load-cmd turns an idle GPU busy for the samples (here: it writes the fixture's state),
    and the verdict is read from the loaded GPU: the state file says "load", every sample was
    taken under load, at the loaded clock. --interval 1 gives the command the check's own
    grace (two intervals) before the first sample."""
    state = tmp_path / "gpu-state"
    proc = run_check(
        tmp_path, "idle", "--json", "--interval", "1", "--load-cmd", f"echo load > {state}"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert state.read_text().strip() == "load"
    result = json.loads(proc.stdout)
    assert result["state"] == "ok"
    assert result["loaded_samples"] == 2 and result["clock_mhz"] == 2405


def test_the_role_installs_this_very_file():
    """host_tuning copies the module itself: one GPU check, not a template beside it."""
    assert INSTALLED.is_symlink()
    assert INSTALLED.resolve() == SCRIPT.resolve()
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env python3\n")


def test_judge_needs_low_clock_and_low_power_under_load():
    limits = gpu.Thresholds()
    assert gpu.judge([(1005, 22, 97), (1000, 21, 95)], limits)["state"] == "stuck"
    # Power-capped but clocking normally, or slow clocks at full power: not the stuck state.
    assert gpu.judge([(2400, 25, 97)], limits)["state"] == "ok"
    assert gpu.judge([(1100, 60, 97)], limits)["state"] == "ok"
    # Only samples under load count: an idle sample does not drag the median down.
    mixed = gpu.judge([(208, 4, 0), (2405, 90, 96), (2400, 88, 97)], limits)
    assert mixed["state"] == "ok" and mixed["loaded_samples"] == 2 and mixed["clock_mhz"] == 2402.5
    assert gpu.judge([], limits)["state"] == "idle"


def test_parsers_read_what_nvidia_smi_prints():
    assert gpu.parse_sample("2405, 89.72, 96") == (2405.0, 89.72, 96.0)
    assert gpu.parse_sample("2405, [N/A], 96") == (2405.0, 0.0, 96.0)
    with pytest.raises(ValueError):
        gpu.parse_sample("2405, 89.72")
    assert gpu.parse_identity("NVIDIA GB10, 580.95.05, P0, 3003, [N/A]")["power_limit_w"] is None
    assert (
        gpu.parse_cuda_version(
            "| NVIDIA-SMI 580.95.05  Driver Version: 580.95.05  CUDA Version: 13.0 |"
        )
        == "13.0"
    )
    assert gpu.parse_cuda_version("CUDA Version        : 13.0\n") == "13.0"
    assert gpu.parse_cuda_version("no version here") is None


def test_the_package_installs_it_as_a_console_script(capsys):
    """The run record finds `sparkops-gpu-check` beside the venv's python: the same main()."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        scripts = tomllib.load(handle)["project"]["scripts"]
    module, _, function = scripts["sparkops-gpu-check"].partition(":")
    assert (module, function) == ("sparkops.doctor.gpu", "main")
    assert gpu.main(["--samples", "0"]) == 5
    assert capsys.readouterr().err.startswith("sparkops-gpu-check: error: --samples")


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """`sparkops-gpu-check --json | head -c1`: the verdict's code, nothing on stderr."""
    (tmp_path / "gpu-state").write_text("stuck")
    env = {
        "PATH": f"{NVIDIA_SMI.parent}:/usr/bin:/bin",
        "SPARKOPS_FIXTURE_GPU_STATE_FILE": str(tmp_path / "gpu-state"),
        "SPARKOPS_GPU_CHECK_CONFIG": str(tmp_path / "absent.json"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-I", str(SCRIPT), "--json", "--samples", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    proc.stdout.close()  # gone before the script has sampled, so its print meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 2
    assert err == ""


def test_the_roles_config_names_exactly_the_thresholds_the_script_reads():
    """host_tuning writes /etc/sparkops/gpu-check.json; an unknown key would stop the check."""
    template = (INSTALLED.parent.parent / "templates" / "gpu-check.json.j2").read_text()
    keys = set(re.findall(r"'(\w+)':", template))
    assert keys == set(gpu.Thresholds.__dataclass_fields__)
    for key in keys:
        assert f"host_tuning_gpu_check_{key}" in template
