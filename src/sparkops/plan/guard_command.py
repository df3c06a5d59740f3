"""`sparkops plan guard`: the whole-host memory check of a profile's launch, read from this
host (its /proc/meminfo, nvidia-smi) or planned for a host of a given size."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from sparkops.console import stdout_console
from sparkops.errors import UserError
from sparkops.plan import bounds
from sparkops.plan.guard import (
    GuardSettings,
    HostKind,
    check_launch,
    host_facts,
    planned_facts,
    profiles_that_fit,
    settings_of,
)
from sparkops.plan.sources import load_config
from sparkops.plan.tables import print_guard

DEFAULT_MEMINFO = Path("/proc/meminfo")


def register_guard(sub: argparse._SubParsersAction) -> None:
    guard = sub.add_parser(
        "guard",
        help="whole-host memory check: would this profile's launch leave a safe margin?",
        description="Adds up weights, KV cache, activations, the OS reserve (the Windows share "
        "under WSL2) and other GPU processes against this host's memory; exit 2 with the "
        "largest KV cache that fits when the launch would not leave the margin.",
    )
    guard.add_argument("--profile", default="gb10-gemma4-12b-fp8", help="profile name or file")
    guard.add_argument(
        "--meminfo",
        type=Path,
        default=DEFAULT_MEMINFO,
        help="the target's /proc/meminfo (a copy of a Spark's may be read anywhere)",
    )
    guard.add_argument(
        "--host-kind",
        choices=["auto", "native", "wsl2"],
        default="auto",
        help="auto: WSL2 when the kernel release names Microsoft",
    )
    guard.add_argument(
        "--nvidia-smi",
        default="nvidia-smi",
        help="command for the GPU processes and memory (absent: none counted)",
    )
    guard.add_argument(
        "--own-pid", type=int, action="append", default=[], help="this stack's GPU pids"
    )
    defaults = GuardSettings()
    guard.add_argument(
        "--total-gb",
        type=float,
        help="host memory (default: MemTotal; WSL2 128); on a host that is not a GB10 (a "
        "controller) the guard plans a host of this size instead of reading this one",
    )
    guard.add_argument(
        "--os-reserve-gb",
        type=float,
        default=defaults.os_reserve_gb,
        help="GB kept for the OS and its services on a native host",
    )
    guard.add_argument(
        "--windows-share-gb",
        type=float,
        default=defaults.windows_share_gb,
        help="under WSL2, GB kept for Windows and Linux together",
    )
    guard.add_argument(
        "--activations-gb", type=float, help="activations and CUDA graphs (gb10 10, cpu 1)"
    )
    guard.add_argument(
        "--margin-gb",
        type=float,
        default=defaults.margin_gb,
        help="GB that must stay free after the launch",
    )
    guard.add_argument(
        "--wsl-linux-gb",
        type=float,
        default=defaults.wsl_linux_gb,
        help="under WSL2, the MemAvailable (GB) the Linux side needs when vLLM starts",
    )
    guard.add_argument(
        "--config", type=Path, help="the model's config.json, for the sequences x context"
    )
    guard.add_argument("--seqs", type=int, help="concurrency to quote (default max_num_seqs)")
    guard.add_argument("--json", action="store_true", help="print the verdict as JSON")
    guard.set_defaults(func=run_guard)


def _nvidia_smi(command: str, query: str) -> str:
    """Output of one nvidia-smi query, or "" where the tool is absent or fails."""
    argv = [*shlex.split(command), query, "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (FileNotFoundError, PermissionError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot read {what} {path} ({err.strerror}): pass --meminfo") from None


def check_guard_options(args: argparse.Namespace) -> None:
    """Refuse figures no host can have before anything is read (plan/bounds.py); those
    beyond the host's own memory are refused by guard.refuse_impossible, for the deploy too."""
    bounds.machine_gb("--total-gb", args.total_gb, bounds.LARGEST_HOST_GB, "one host")
    for name in (
        "os_reserve_gb",
        "windows_share_gb",
        "activations_gb",
        "margin_gb",
        "wsl_linux_gb",
    ):
        bounds.at_least(f"--{name.replace('_', '-')}", getattr(args, name), 0, "GB")
    bounds.at_least("--seqs", args.seqs, 1, "sequence")


def run_guard(args: argparse.Namespace) -> int:
    from sparkops.profiles import available_profiles, load_profile

    check_guard_options(args)
    profile = load_profile(args.profile)
    osrelease = ""
    if args.host_kind == "auto":
        try:
            osrelease = Path("/proc/sys/kernel/osrelease").read_text(encoding="utf-8")
        except OSError:
            osrelease = ""
    gpu_total = _nvidia_smi(args.nvidia_smi, "--query-gpu=memory.total")
    settings = settings_of(args, prefix="")
    # A GB10 answers nvidia-smi (memory.total "[N/A]" on a DGX Spark); a controller without
    # one is not the target, and its own /proc/meminfo says nothing about the Spark's.
    off_target = (
        profile.platform == "gb10" and not gpu_total.strip() and args.meminfo == DEFAULT_MEMINFO
    )
    if off_target and args.total_gb is None:
        raise UserError(
            f"this host answers no nvidia-smi: it is not the GB10 that {profile.name} runs "
            f"on, and its memory says nothing about the Spark's. Run this on the Spark "
            f"(sparkops plan guard --profile {profile.name}), or plan for one from here with "
            "--total-gb 128 (--total-gb 64 for a 64 GB RTX Spark, with --host-kind wsl2 under "
            "Windows)"
        )
    if off_target:
        kind: HostKind = "wsl2" if args.host_kind == "wsl2" else "native"
        facts = planned_facts(kind, args.total_gb)
        host = f"a {args.total_gb:g} GB {'WSL2 ' if kind == 'wsl2' else ''}host (--total-gb)"
    else:
        facts = host_facts(
            meminfo=_read(args.meminfo, "memory file"),
            osrelease=osrelease,
            kind=args.host_kind,
            compute_apps=_nvidia_smi(
                args.nvidia_smi, "--query-compute-apps=pid,process_name,used_memory"
            ),
            gpu_total=gpu_total,
            own_pids=args.own_pid,
        )
        host = "this host"
    config = load_config(args.config)[0] if args.config else None
    verdict = check_launch(profile, facts, settings, host=host, hf_config=config, seqs=args.seqs)
    if not verdict.ok:
        bundled = [load_profile(name) for name in available_profiles()]
        fits = profiles_that_fit(profile, facts, settings, bundled)
        verdict = replace(
            verdict,
            message=verdict.message
            + (
                f"; or use a bundled profile that fits here: {', '.join(f.name for f in fits)}"
                if fits
                else "; no bundled profile fits here"
            ),
        )
    if args.json:
        print(json.dumps(verdict.as_dict(), indent=2))
        if not verdict.ok:
            print(f"sparkops: error: {verdict.message}", file=sys.stderr)
            return 2
        return 0
    if not verdict.ok:
        raise UserError(verdict.message)
    print_guard(verdict, stdout_console())
    return 0
