"""From what preflight.yml gathered on a Spark to its summary: Ansible's results in, checks out.

The playbook registers raw task results (a slurped /proc/meminfo, the uri module's status, the
community.docker modules' answers, `sparkops-gpu-check --json`'s stdout, ...) and passes them
here in one mapping, with its settings in another:

    {{ facts | sparkops_preflight(settings) }}

This module only reads those mappings (pure: no I/O) and knows Ansible's result shapes: a
skipped task has no `rc`, a uri that reached nothing has status -1, a Docker module that could
not ask Docker has no `exists`. The verdicts themselves are sparkops.doctor.checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from sparkops.doctor import checks, host, windows
from sparkops.doctor.checks import Check
from sparkops.plan.guard import host_kind
from sparkops.vocabulary import DEFAULT_CONCURRENCY


class Settings(BaseModel):
    """preflight.yml's variables the verdicts depend on (sparkops_preflight_<name>).

    Their defaults are written once, in ansible/playbooks/vars/preflight.yml, where a user
    reads and overrides them (the play uses most of them itself), and the play passes every
    one: so none has a default here but the concurrency, which the play leaves to the
    batch client's own default (sparkops.vocabulary) unless the inventory plans another.
    """

    model_config = ConfigDict(extra="forbid")

    drop_caches: bool
    min_available_gib: float
    min_available_gib_wsl2: float
    vllm_url: str
    vllm_container: str
    hash_algo: str
    concurrency: int = DEFAULT_CONCURRENCY
    tokens_per_request: int
    max_kv_usage: float
    output_dir: str
    min_free_disk_gib: float
    # the host itself before a day-long job (doctor/host.py)
    max_uptime_days: float
    fragmentation_block_mib: float
    min_high_order_gib: float
    # the plan's GPU memory budget (vllm_serving_gpu_memory_gib), "" when none is planned
    gpu_memory_gib: Annotated[float | None, BeforeValidator(lambda v: None if v == "" else v)]
    # the laptop's Windows side through WSL2 interop (doctor/windows.py): "auto" on WSL2 only
    windows: Literal["auto"] | bool
    wsl_autostart_script: str


class SettingsError(ValueError):
    """A preflight variable with a value of the wrong kind; the message names the variable."""


def parse_settings(settings: Mapping[str, Any]) -> Settings:
    """Validate the playbook's settings, naming the variable a user got wrong."""
    try:
        return Settings.model_validate(dict(settings))
    except ValidationError as error:
        problems = "; ".join(
            f"sparkops_preflight_{'.'.join(str(p) for p in item['loc'])}: {item['msg']}"
            for item in error.errors()
        )
        raise SettingsError(problems) from error


def _text(result: Mapping[str, Any] | None, key: str) -> str:
    value = (result or {}).get(key)
    return "" if value is None else str(value).strip()


def _rc(result: Mapping[str, Any] | None) -> int | None:
    """A command's exit status; None when it never ran (skipped, or the module failed first)."""
    rc = (result or {}).get("rc")
    return None if rc is None else int(rc)


def gpu_verdict(result: Mapping[str, Any] | None) -> tuple[dict | None, str]:
    """sparkops-gpu-check's JSON verdict, or None and why there is none.

    The exit status alone cannot tell "stuck" (2) from "no such file" (2 from the command
    module), so the JSON on stdout is the answer and its absence is the failure.
    """
    stdout = _text(result, "stdout")
    try:
        verdict = json.loads(stdout.splitlines()[-1]) if stdout else None
    except ValueError:
        verdict = None
    if isinstance(verdict, dict) and "state" in verdict:
        return verdict, ""
    why = _text(result, "stderr") or _text(result, "msg") or stdout or "no output"
    return None, why


def run_checks(facts: Mapping[str, Any], settings: Settings) -> list[Check]:
    """Every check, in the order the playbook has always printed them."""
    drop = facts.get("drop") or {}
    health = facts.get("health") or {}
    container = facts.get("container") or {}
    xxhash = facts.get("xxhash") or {}
    metrics = facts.get("metrics") or {}
    cache_config = metrics.get("cache_config") or {}
    status = int(health.get("status", -1))
    up = status == 200

    found: list[Check] = [
        checks.page_cache_dropped(
            settings.drop_caches, bool(facts.get("check_mode")), _rc(drop), _text(drop, "stderr")
        ),
        checks.memory_headroom(
            str(facts.get("meminfo") or ""),
            str(facts.get("kernel") or ""),
            settings.min_available_gib,
            settings.min_available_gib_wsl2,
        ),
        checks.vllm_healthy(status, settings.vllm_url),
    ]
    if settings.vllm_container:
        found.append(
            checks.vllm_container(
                settings.vllm_container,
                probed="exists" in container,
                exists=bool(container.get("exists")),
                state=(container.get("container") or {}).get("State") or {},
                error=_text(container, "msg"),
                answering=up,
            )
        )
    found.append(checks.vllm_answers(up, facts.get("ready") or {}))
    found.append(checks.gpu_power_state(*gpu_verdict(facts.get("gpu"))))
    found.append(checks.prefix_caching_hash_algo(up, cache_config, settings.hash_algo))
    found.append(
        checks.kv_cache_headroom(
            up,
            cache_config,
            metrics.get("kv_cache_usage"),
            settings.concurrency,
            settings.tokens_per_request,
            settings.max_kv_usage,
        )
    )
    found.append(
        checks.xxhash_importable(
            settings.vllm_container,
            _rc(xxhash),
            _text(xxhash, "stdout"),
            _text(xxhash, "stderr"),
            _text(xxhash, "msg"),
            container_probed="exists" in container,
            server_algo=(cache_config.get("prefix_caching_hash_algo") or "") if up else "",
        )
    )
    disk = facts.get("disk") or {}
    found.append(
        checks.output_disk_space(
            int(_text(disk, "stdout") or 0), settings.output_dir, settings.min_free_disk_gib
        )
    )
    found += host_checks(facts, settings)
    if windows_side(settings.windows, str(facts.get("kernel") or "")):
        found += windows_checks(facts.get("windows") or {}, settings)
    return found


def kernel_log(result: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(source, NVRM lines, why unreadable) from the playbook's kernel-log task, whose first
    line is `source=journalctl`, `source=dmesg` or `source=none` (then the reason)."""
    first, _, rest = _text(result, "stdout").partition("\n")
    source = first.removeprefix("source=").strip()
    if source in ("journalctl", "dmesg"):
        return source, rest, ""
    return "", "", rest.strip() or _text(result, "stderr") or _text(result, "msg")


def host_checks(facts: Mapping[str, Any], settings: Settings) -> list[Check]:
    """The GPU driver's errors since boot, fragmentation, uptime, what CUDA can allocate
    against the plan (doctor/host.py)."""
    source, log, why = kernel_log(facts.get("kernel_log"))
    try:
        page_size = int(_text(facts.get("page_size"), "stdout") or 0)
    except ValueError:
        page_size = 0
    return [
        host.gpu_driver_errors(source, log, why),
        host.memory_fragmentation(
            str(facts.get("buddyinfo") or ""),
            page_size,
            settings.fragmentation_block_mib,
            settings.min_high_order_gib,
        ),
        host.host_uptime(str(facts.get("uptime") or ""), settings.max_uptime_days),
        host.cuda_allocatable(cuda_memory(facts), settings.gpu_memory_gib),
    ]


def cuda_memory(facts: Mapping[str, Any]) -> host.CudaMemory | None:
    """What CUDA can allocate, from nvidia-smi's memory.total and compute apps, MemAvailable
    after the drop, this stack's container's processes (`docker top`) and /health."""
    pids = frozenset(
        int(word) for word in _text(facts.get("own_pids"), "stdout").split() if word.isdigit()
    )
    return host.cuda_memory(
        _text(facts.get("gpu_total"), "stdout"),
        str(facts.get("meminfo") or ""),
        _text(facts.get("compute_apps"), "stdout"),
        pids,
        int((facts.get("health") or {}).get("status", -1)) == 200,
    )


def windows_side(setting: str | bool, kernel: str) -> bool:
    """Whether to read the Windows side: on WSL2 ("auto"), or as the setting says."""
    return setting is True or (setting == "auto" and host_kind(kernel) == "wsl2")


def windows_checks(found: Mapping[str, Any], settings: Settings) -> list[Check]:
    """Sleep timers, a pending restart, the autostart task (doctor/windows.py)."""
    interop = bool(found.get("interop"))
    powercfg = found.get("powercfg") or {}
    return [
        windows.windows_sleep(
            interop, _text(powercfg, "stdout"), _rc(powercfg), _text(powercfg, "msg")
        ),
        windows.windows_restart_pending(
            interop, _rc(found.get("reboot_update")), _rc(found.get("reboot_servicing"))
        ),
        windows.wsl_autostart(interop, _rc(found.get("task")), settings.wsl_autostart_script),
    ]


def preflight(facts: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The summary preflight.yml prints: {"ok": bool, "checks": [{name, ok, detail, fix}]}."""
    return checks.summarise(run_checks(facts, parse_settings(settings)))
