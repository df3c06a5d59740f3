"""The preflight checks: each one a pure function from facts already gathered to a Check.

deepops' doctor script is the model: every check answers `check(name, ok, detail)`, and here a
`fix` too, the one thing to do when it failed ("" when it passed). Nothing in this module reads
a file, runs a command or opens a socket: ansible/playbooks/preflight.yml gathers the facts on
each Spark and hands them over through the `sparkops_preflight` filter
(sparkops.doctor.preflight turns Ansible's task results into these arguments), so every verdict
and every word of advice is unit-tested in milliseconds instead of in a playbook run.

The GPU check is not re-implemented here: `gpu_power_state` reads the verdict of
`sparkops-gpu-check --json` (sparkops.doctor.gpu), the one GPU check with the one threshold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sparkops.plan.guard import host_kind, parse_meminfo
from sparkops.plan.memory import GIB

START_VLLM = "start vLLM first (see vllm_healthy)"
RUN_AS_ROOT = (
    "run preflight as root on the Spark itself (become); a container cannot drop the host page "
    "cache"
)
CURE = (
    "stuck low-power state: shut down fully with the charger unplugged at both ends, then power "
    "on (a reboot does not clear it); on the laptop use the Performance profile"
)


@dataclass(frozen=True)
class Check:
    """One verdict: what was checked, whether it passed, what was seen, what to do about it.

    A `warning` that did not pass is said with its fix but fails no preflight (an uptime past
    a week, a Windows sleep timer: the job may still run)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(name: str, ok: bool, detail: str, fix: str) -> Check:
    """A Check whose fix is empty when it passed (a fix is advice for failures only)."""
    return Check(name, ok, detail, "" if ok else fix)


def warn_or_pass(name: str, ok: bool, detail: str, fix: str) -> Check:
    """A Check that warns (with its fix) when it did not pass, and fails nothing."""
    return Check(name, ok, detail, "" if ok else fix, warning=not ok)


def docker_probe_fix(error: str) -> str:
    """What to do when a Docker probe itself could not run (not what the stack would need)."""
    if "requests" in error:
        return (
            "preflight could not ask Docker: install python3-requests on the Spark "
            "(apt-get install python3-requests), which the community.docker modules need, and "
            "run preflight again"
        )
    return (
        f"preflight could not ask Docker ({error}): start the Docker engine "
        "(systemctl start docker) and run preflight again"
    )


def page_cache_dropped(enabled: bool, check_mode: bool, rc: int | None, stderr: str) -> Check:
    """The page cache was dropped, so vLLM's start-up profiling sees the memory as free."""
    if not enabled:
        return _check("page_cache_dropped", True, "disabled", "")
    if check_mode:
        return _check("page_cache_dropped", True, "skipped in check mode", "")
    ok = rc == 0
    return _check("page_cache_dropped", ok, "dropped" if ok else stderr.strip(), RUN_AS_ROOT)


def memory_headroom(meminfo: str, kernel: str, min_gib: float, min_gib_wsl2: float) -> Check:
    """Enough memory the kernel can hand out; more under WSL2, which shares it with Windows."""
    wsl2 = host_kind(kernel) == "wsl2"
    need = min_gib_wsl2 if wsl2 else min_gib
    fix = (
        "close heavy Windows programs and raise memory in .wslconfig, then wsl --shutdown"
        if wsl2
        else "stop what else uses memory on the Spark before the job"
    )
    available = parse_meminfo(meminfo).get("MemAvailable")
    if available is None:
        return _check("memory_headroom", False, "/proc/meminfo has no MemAvailable line", fix)
    gib = available / GIB
    detail = f"{gib:.1f} GiB available ({'WSL2' if wsl2 else 'this host'} needs {need:g})"
    return _check("memory_headroom", gib >= need, detail, fix)


def vllm_healthy(status: int, url: str) -> Check:
    """vLLM answers 200 on /health (status -1: nothing answered)."""
    detail = f"GET /health -> {status}" if status != -1 else f"no answer at {url}/health"
    return _check(
        "vllm_healthy",
        status == 200,
        detail,
        "start the serving stack (restart.yml) and read its log (logs.yml)",
    )


def vllm_answers(up: bool, ready: Mapping[str, Any]) -> Check:
    """One real chat completion through the served model name came back with text.

    /health answers 200 while every request fails in known cases (xxhash missing with
    `--prefix-caching-hash-algo xxhash`, a hung engine, a broken chat template, a wrong key),
    so a healthy server is not yet one that answers.
    """
    if not up:
        return _check("vllm_answers", False, "vLLM is not answering /health", START_VLLM)
    if ready.get("answered"):
        detail = f"{ready.get('model')} answered {str(ready.get('reply') or '')!r}"
        return _check("vllm_answers", True, detail, "")
    problem = str(ready.get("problem") or "no chat completion was sent")
    return _check(
        "vllm_answers",
        False,
        problem,
        "read the server's log (logs.yml) for the failing request, fix what it names, then "
        "restart the serving stack (restart.yml)",
    )


def vllm_container(
    name: str,
    probed: bool,
    exists: bool,
    state: Mapping[str, Any],
    error: str,
    answering: bool = False,
) -> Check:
    """The serving container runs and is healthy (or has no health check).

    `probed` is whether Docker could be asked at all; when it could not, the fix is about the
    probe (Docker down, python3-requests missing), not about the stack. Docker's own health
    check reads "starting" for its start period after a deploy; while /health already answers
    200 (`answering`) that container is up, not one to restart.
    """
    health = (state.get("Health") or {}).get("Status") or "none"
    fine = ("healthy", "none", "starting") if answering else ("healthy", "none")
    ok = bool(state.get("Running")) and health in fine
    if exists:
        detail = f"{name}: {state.get('Status') or 'absent'}, health {health}"
        if ok and health == "starting":
            detail += " (Docker's check is in its start period; /health answers 200)"
    elif probed:
        detail = f"{name}: container absent"
    else:
        detail = f"the probe could not run: {error}"
    fix = "deploy or restart the serving stack (restart.yml)" if probed else docker_probe_fix(error)
    return _check("vllm_container", ok, detail, fix)


def gpu_power_state(verdict: Mapping[str, Any] | None, error: str) -> Check:
    """The GPU runs at full clocks under the preflight's short load, judged by sparkops-gpu-check.

    `verdict` is `sparkops-gpu-check --json`'s object, None when the script could not run or
    printed no JSON (`error` then says why).
    """
    if verdict is None:
        return _check(
            "gpu_power_state",
            False,
            f"sparkops-gpu-check could not run: {error}",
            "install it with provision.yml (the host_tuning role puts sparkops-gpu-check in "
            "/usr/local/bin) or set sparkops_preflight_gpu_check to its path",
        )
    state = verdict.get("state")
    if state in ("no-gpu", "error"):
        return _check(
            "gpu_power_state",
            False,
            f"nvidia-smi failed: {verdict.get('message', '')}",
            "install the NVIDIA driver or set sparkops_preflight_nvidia_smi to its path",
        )
    if "clock_mhz" in verdict:
        detail = (
            f"{verdict['clock_mhz']:.0f} MHz, {verdict['power_w']:.0f} W, "
            f"{verdict['util_pct']:.0f}% busy under load"
        )
    else:
        detail = str(verdict.get("message", "no reading"))
    if state == "stuck":
        fix = CURE
    elif state == "idle":
        fix = "the GPU stayed idle under load: check vLLM runs on the GPU and is healthy"
    else:
        fix = f"sparkops-gpu-check said: {verdict.get('message', state)}"
    return _check("gpu_power_state", state == "ok", detail, fix)


def prefix_caching_hash_algo(up: bool, cache_config: Mapping[str, Any], want: str) -> Check:
    """The server hashes prefix-cache blocks with `want` (xxhash: fast, what the plan assumes)."""
    algo = cache_config.get("prefix_caching_hash_algo") or "unknown"
    detail = f"server reports {algo}" if up else "vLLM is not answering"
    fix = (
        f"serve with --prefix-caching-hash-algo {want} (pip install xxhash in the image first)"
        if up
        else START_VLLM
    )
    return _check("prefix_caching_hash_algo", algo == want, detail, fix)


def kv_cache_headroom(
    up: bool,
    cache_config: Mapping[str, Any],
    usage_now: float | None,
    concurrency: int,
    tokens_per_request: int,
    max_usage: float,
) -> Check:
    """The planned concurrency fits in the KV cache below `max_usage`, on top of today's use."""
    try:
        capacity = int(float(cache_config.get("kv_cache_size_tokens") or 0))
    except ValueError:
        capacity = 0
    now = usage_now or 0.0
    planned = now + concurrency * tokens_per_request / capacity if capacity > 0 else 2.0
    if capacity > 0:
        detail = (
            f"{concurrency} requests x {tokens_per_request} tokens would use "
            f"{100 * planned:.0f}% of {capacity} cached tokens (now {100 * now:.0f}%)"
        )
    elif up:
        detail = "the server does not report its KV cache size"
    else:
        detail = "vLLM is not answering"
    fix = (
        "lower the concurrency or raise --kv-cache-memory-bytes (see: sparkops plan memory)"
        if up
        else START_VLLM
    )
    return _check("kv_cache_headroom", planned < max_usage, detail, fix)


def xxhash_importable(
    container: str,
    exec_rc: int | None,
    exec_stdout: str,
    exec_stderr: str,
    exec_error: str,
    container_probed: bool,
    server_algo: str,
) -> Check:
    """xxhash imports in the serving container (or, without one, the server hashes with it).

    `exec_rc` is None when python3 never ran in the container (the probe itself failed).
    """
    name = "xxhash_importable"
    if not container:
        ok = server_algo == "xxhash"
        detail = (
            "the healthy server hashes with xxhash, so it imported it"
            if ok
            else "cannot tell: the server is down or does not hash with xxhash"
        )
        return _check(
            name, ok, detail, "pip install xxhash in the vLLM image, then restart the server"
        )
    ok = exec_rc == 0
    if ok:
        detail = f"xxhash {exec_stdout.strip()} in {container}"
    elif exec_rc is not None:
        detail = exec_stderr.strip()
    else:
        detail = f"the probe could not run: {exec_error}"
    if exec_rc is not None:
        fix = "pip install xxhash in the vLLM image, then restart the server"
    elif container_probed:
        fix = "start the serving container first (see vllm_container)"
    else:
        fix = docker_probe_fix(exec_error)
    return _check(name, ok, detail, fix)


def output_disk_space(free_bytes: int, path: str, min_gib: float) -> Check:
    """Room for the job's outputs where it writes them."""
    free = free_bytes / GIB
    return _check(
        "output_disk_space",
        free >= min_gib,
        f"{free:.1f} GiB free for {path} (needs {min_gib:g})",
        "free space or point the job at a larger disk",
    )


def summarise(checks: Iterable[Check]) -> dict[str, Any]:
    """{"ok": every check passed or only warns, "checks": [...]}: the JSON preflight prints
    and writes."""
    listed = [check.as_dict() for check in checks]
    return {"ok": all(check["ok"] or check["warning"] for check in listed), "checks": listed}
