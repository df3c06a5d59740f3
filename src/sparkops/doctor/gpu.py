#!/usr/bin/env python3
"""sparkops-gpu-check: catch a GB10 stuck in its low-power state before a long run.

A GB10 (DGX Spark, RTX Spark) can get stuck at about 1 GHz and 22 W under full load, where a
healthy one runs near 2.4 GHz. Jobs then run at a fraction of their speed with no error.
This samples SM clock, power and utilisation with nvidia-smi, optionally while a short load
command runs, and judges only the samples taken under load. With --json it prints one object:
the verdict (state, rc, message, the medians it judged) and the GPU it read (name, driver and
CUDA versions, power state, maximum SM clock, power limit; null where the GPU does not say).

This file is the one GPU check of the kit, in two places: the host_tuning role copies it to
/usr/local/bin/sparkops-gpu-check on every Spark (it runs on the host's own python3, before and
without the sparkops package, so it uses the standard library only), and the package installs
it as the console script `sparkops-gpu-check`. The thresholds live in one place: the role writes
its variables to /etc/sparkops/gpu-check.json, which this reads for its defaults; preflight.yml
calls this script rather than judging nvidia-smi itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

CONFIG = "/etc/sparkops/gpu-check.json"
SEARCH_PATH = "/usr/lib/wsl/lib:/usr/local/bin:/usr/bin:/bin"
SAMPLE_FIELDS = "clocks.sm,power.draw,utilization.gpu"
IDENTITY_FIELDS = "name,driver_version,pstate,clocks.max.sm,power.limit"
CURE = (
    "Cure: shut the machine down fully and remove power; on an RTX Spark laptop unplug the "
    "charger at both ends (wall and laptop), on a DGX Spark unplug its power cable; wait a "
    "minute, then start it again. A reboot does not clear it. On a laptop also check the power "
    "profile (Performance or Manual in ProArt Creator Hub: Standard holds the chip to 45 W)."
)
EXIT_CODES = """exit status:
  0  healthy: clocks and power are normal under load
  1  nvidia-smi is there but could not be read
  2  stuck in the low-power state (the cure is printed)
  3  not judged: the GPU was not under load (run it during a job or with --load-cmd)
  4  not judged: no nvidia-smi
  5  usage or configuration error (one line on stderr)"""

Reading = tuple[float, float, float]  # (SM clock MHz, power W, utilisation %)


@dataclass(frozen=True)
class Thresholds:
    """What counts as under load, and as stuck; the defaults are host_tuning's."""

    samples: int = 5
    interval: float = 1.0
    min_util: float = 80.0
    stuck_max_mhz: float = 1300.0
    stuck_max_watts: float = 30.0


class UsageError(Exception):
    """A bad option or configuration file: exit 5 with one line, no traceback."""


def load_thresholds(path: str) -> Thresholds:
    """Thresholds from the JSON file host_tuning writes; built-in defaults when it is absent."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return Thresholds()
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold one JSON object")
    known = set(Thresholds.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{path}: unknown keys {', '.join(unknown)} (known: {sorted(known)})")
    try:
        values: dict[str, Any] = {key: float(value) for key, value in data.items()}
    except (TypeError, ValueError) as error:
        raise UsageError(f"{path}: every value must be a number ({error})") from error
    if "samples" in values:
        values["samples"] = int(values["samples"])
    return Thresholds(**values)


def number(text: str) -> float | None:
    """An nvidia-smi value (nounits) as a float; None for "[N/A]", "N/A" or "[Not Supported]"."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_sample(line: str) -> Reading:
    """One CSV line of SAMPLE_FIELDS; a power draw the GPU does not report reads as 0 W."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != 3:
        raise ValueError(f"expected 3 fields ({SAMPLE_FIELDS}), got {line.strip()!r}")
    clock, power, util = (number(part) for part in parts)
    if clock is None or util is None:
        raise ValueError(f"no SM clock or utilisation in {line.strip()!r}")
    return clock, power or 0.0, util


def parse_identity(line: str) -> dict:
    """One CSV line of IDENTITY_FIELDS as {name, driver_version, pstate, clock_max_mhz, ...}."""
    parts = [part.strip() for part in line.split(",")]
    parts += [""] * (5 - len(parts))
    name, driver, pstate, clock_max, power_limit = parts[:5]
    return {
        "name": name or None,
        "driver_version": driver or None,
        "pstate": pstate if pstate and "N/A" not in pstate else None,
        "clock_max_mhz": number(clock_max),
        "power_limit_w": number(power_limit),
    }


def parse_cuda_version(text: str) -> str | None:
    """The CUDA version from `nvidia-smi --version` or the plain banner ("CUDA Version: 13.0")."""
    found = re.search(r"CUDA Version\s*:\s*([0-9][0-9.]*)", text)
    return found.group(1) if found else None


def judge(readings: Sequence[Reading], limits: Thresholds) -> dict:
    """Verdict from the readings taken under load (pure: no I/O).

    Stuck needs both a low clock AND low power: a healthy GPU may clock down when power-capped,
    and a light load may draw little power at full clocks.
    """
    loaded = [r for r in readings if r[2] >= limits.min_util]
    judged = loaded or list(readings)
    base: dict = {"samples": len(readings), "loaded_samples": len(loaded)}
    if judged:
        base |= {
            "clock_mhz": statistics.median(r[0] for r in judged),
            "power_w": statistics.median(r[1] for r in judged),
            "util_pct": statistics.median(r[2] for r in judged),
        }
    if not loaded:
        peak = max((r[2] for r in readings), default=0.0)
        return base | {
            "state": "idle",
            "rc": 3,
            "message": (
                f"GPU power state not judged: utilisation stayed below {limits.min_util:g}% "
                f"(peak {peak:.0f}%). Rerun sparkops-gpu-check during a job or with --load-cmd."
            ),
        }
    clock, power, util = base["clock_mhz"], base["power_w"], base["util_pct"]
    if clock <= limits.stuck_max_mhz and power <= limits.stuck_max_watts:
        return base | {
            "state": "stuck",
            "rc": 2,
            "message": (
                f"GPU is stuck in its low-power state: {clock:.0f} MHz and {power:.1f} W at "
                f"{util:.0f}% utilisation (a healthy GB10 runs near 2.4 GHz under load). {CURE}"
            ),
        }
    return base | {
        "state": "ok",
        "rc": 0,
        "message": (
            f"GPU power state ok: {clock:.0f} MHz and {power:.1f} W at {util:.0f}% utilisation."
        ),
    }


# --- I/O edge: nvidia-smi and the command line -------------------------------------------------


def find_nvidia_smi(name: str) -> str | None:
    """nvidia-smi on PATH, or where WSL2 and the driver packages put it (sudo's PATH is short)."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name) or shutil.which(name, path=SEARCH_PATH)


def query(smi: str, fields: str) -> str:
    """First line of `nvidia-smi --query-gpu=FIELDS` (the first GPU: a GB10 has one)."""
    out = subprocess.run(
        [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return (out.splitlines() or [""])[0]


def read_identity(smi: str) -> dict:
    """Driver, CUDA, power state and limits; fields the tool refuses stay null."""
    try:
        identity = parse_identity(query(smi, IDENTITY_FIELDS))
    except (subprocess.SubprocessError, OSError):
        identity = parse_identity("")
    cuda = None
    for argv in ([smi, "--version"], [smi]):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (subprocess.SubprocessError, OSError):
            continue
        cuda = parse_cuda_version(proc.stdout)
        if cuda:
            break
    return identity | {"cuda_version": cuda}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Options; defaults come from the configuration file (host_tuning's variables)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=os.environ.get("SPARKOPS_GPU_CHECK_CONFIG", CONFIG))
    known, _ = pre.parse_known_args(argv)
    limits = load_thresholds(known.config)

    parser = _Parser(
        prog="sparkops-gpu-check",
        description=__doc__.split("\n\n")[1],
        epilog=EXIT_CODES,
        formatter_class=_Formatter,
    )
    parser.add_argument("--config", default=known.config, help="thresholds (JSON)")
    parser.add_argument("--samples", type=int, default=limits.samples, help="readings to take")
    parser.add_argument("--interval", type=float, default=limits.interval, help="seconds apart")
    parser.add_argument(
        "--min-util", type=float, default=limits.min_util, help="%% that counts as under load"
    )
    parser.add_argument(
        "--stuck-max-mhz", type=float, default=limits.stuck_max_mhz, help="stuck at or below"
    )
    parser.add_argument(
        "--stuck-max-watts", type=float, default=limits.stuck_max_watts, help="and at or below"
    )
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the tool, or its path")
    parser.add_argument("--load-cmd", default="", help="shell command run as load while sampling")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.interval < 0:
        raise UsageError("--samples must be at least 1 and --interval not negative")
    return args


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown in --help, and the exit codes kept as written."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is exit 5: exit 2 already means "stuck"."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def check(args: argparse.Namespace) -> dict:
    """Sample (with the load running, if any), judge, and describe the GPU."""
    limits = Thresholds(
        args.samples, args.interval, args.min_util, args.stuck_max_mhz, args.stuck_max_watts
    )
    smi = find_nvidia_smi(args.nvidia_smi)
    if smi is None:
        return {
            "state": "no-gpu",
            "rc": 4,
            "message": f"GPU power state not judged: no {args.nvidia_smi}.",
            "thresholds": asdict(limits),
            "gpu": None,
        }
    load = subprocess.Popen(["sh", "-c", args.load_cmd]) if args.load_cmd else None
    try:
        if load is not None:
            time.sleep(min(2.0, args.interval * 2))
        readings = []
        for index in range(args.samples):
            readings.append(parse_sample(query(smi, SAMPLE_FIELDS)))
            if index + 1 < args.samples:
                time.sleep(args.interval)
    except (subprocess.SubprocessError, OSError, ValueError) as error:
        detail = getattr(error, "stderr", None) or error
        result = {
            "state": "error",
            "rc": 1,
            "message": f"nvidia-smi could not be read: {str(detail).strip()}",
        }
    else:
        result = judge(readings, limits)
    finally:
        if load is not None:
            load.terminate()
            load.wait()
    return result | {"thresholds": asdict(limits), "gpu": read_identity(smi)}


def main(argv: Sequence[str] | None = None) -> int:
    """Sample, judge, print, and exit with the verdict's code (see EXIT_CODES)."""
    try:
        args = parse_args(argv)
    except UsageError as error:
        print(f"sparkops-gpu-check: error: {error}", file=sys.stderr)
        return 5
    result = check(args)
    try:
        print(json.dumps(result) if args.json else result["message"], flush=True)
    except BrokenPipeError:  # the reader left (`| head`): keep the verdict's code, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return int(result["rc"])


if __name__ == "__main__":
    sys.exit(main())
