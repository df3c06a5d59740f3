"""Whole-host memory guard: will this launch leave the host a safe margin? (pure)

On a GB10 the GPU and the CPU share one 128 GB pool. A launch that over-commits it does not
fail the vLLM process: it freezes or resets the whole Spark. So before anything changes on
the host, the deploy adds up what the launch takes and what must stay, and refuses a launch
that leaves less than a margin, naming the largest KV cache that does fit.

What is added up (decimal GB, like the seeds' figures):
- the weights (the profile's `weights_gib`) and the KV cache (`--kv-cache-memory-bytes`, or on
  vLLM-CPU `VLLM_CPU_KVCACHE_SPACE` GiB); a profile sized by `--gpu-memory-utilization` alone
  takes that fraction of the GPU's memory for weights, activations and cache together;
- an allowance for activations and CUDA graphs (10 GB on a GB10: the seed's largest KV cache
  that started beside FP8 weights with 96 GB for the GPU was 60 GiB, and 64 GiB did not;
  10 GB plus the 4 GB margin puts the limit between the two, at about 62.9 GiB);
- the OS reserve (12 GB: the second seed's "leave ~12 GB for Grace-side processes", which with
  the 4 GB margin leaves the seed's ~112 GB, 0.88 x 128, for vLLM);
- other GPU processes (`nvidia-smi --query-compute-apps`), minus this stack's own (a redeploy
  replaces them);
- under WSL2 the Windows share (~32 GB for Windows and Linux together on an RTX Spark with
  96 GB given to the GPU, the first seed) in place of the OS reserve: WSL2 sees only its own
  VM in /proc/meminfo, so the pool is the machine's 128 GB unless the inventory says otherwise.

Three checks, each with its own margin:
- the pool: weights + KV + activations + reserve + other GPU processes <= total - margin;
- the GPU's own memory where nvidia-smi reports one (WSL2: what the NVIDIA app set aside):
  weights + KV + activations + other GPU processes <= GPU memory - margin;
- now (native hosts): weights + KV + activations <= MemAvailable + this stack's GPU memory -
  margin, so memory other programs hold today counts too (skipped, and said so, where this
  stack's running vLLM does not report its memory: the start-time check then decides).

Right before vLLM starts, the host's own check (templates/serving/memory-guard.sh.j2) drops
the page cache and compares MemAvailable with `start_bar_bytes`: the launch plus the margin
on a native host; under WSL2 (whose MemAvailable does not hold the GPU's memory) the Linux
side's minimum.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from sparkops.errors import UserError
from sparkops.plan.host_readings import GpuProcess as GpuProcess
from sparkops.plan.host_readings import HostKind as HostKind
from sparkops.plan.host_readings import host_kind as host_kind
from sparkops.plan.host_readings import parse_compute_apps as parse_compute_apps
from sparkops.plan.host_readings import parse_gpu_total as parse_gpu_total
from sparkops.plan.host_readings import parse_meminfo as parse_meminfo
from sparkops.plan.memory import GB, GIB, MIB, MemoryPlan, plan_memory
from sparkops.profiles.schema import Profile

# Every GB10 machine (DGX Spark, RTX Spark) has 128 GB; WSL2 cannot see the Windows side.
GB10_TOTAL_GB = 128.0
# vLLM-CPU's default KV cache when VLLM_CPU_KVCACHE_SPACE is unset (GiB).
CPU_KV_DEFAULT_GIB = 4
ACTIVATIONS_GB = {"gb10": 10.0, "cpu": 1.0}


@dataclass(frozen=True)
class GuardSettings:
    """The inventory's `vllm_serving_memory_*` figures (decimal GB)."""

    total_gb: float | None = None  # None: MemTotal natively, GB10_TOTAL_GB under WSL2
    os_reserve_gb: float = 12.0
    windows_share_gb: float = 32.0
    activations_gb: float | None = None  # None: ACTIVATIONS_GB of the profile's platform
    margin_gb: float = 4.0
    wsl_linux_gb: float = 8.0


@dataclass(frozen=True)
class HostFacts:
    """What the host says about its memory right now."""

    kind: HostKind
    mem_total_bytes: int
    mem_available_bytes: int
    gpu_total_bytes: int | None = None  # None where nvidia-smi reports [N/A] (GB10 native)
    gpu_processes: tuple[GpuProcess, ...] = ()
    own_pids: frozenset[int] = frozenset()
    # False: figures given for a host planned from elsewhere (planned_facts), nothing measured
    measured: bool = True

    def others(self) -> list[GpuProcess]:
        """GPU processes that are not this stack's own."""
        return [p for p in self.gpu_processes if p.pid not in self.own_pids]

    def own_gpu_bytes(self) -> int:
        return sum(p.used_bytes or 0 for p in self.gpu_processes if p.pid in self.own_pids)

    def own_unreported(self) -> bool:
        """Whether one of this stack's GPU processes does not report its memory ([N/A])."""
        return any(p.used_bytes is None for p in self.gpu_processes if p.pid in self.own_pids)


@dataclass(frozen=True)
class LaunchNeed:
    """What one vLLM launch of a profile takes."""

    weights_bytes: int
    kv_bytes: int | None  # None: sized by gpu_memory_utilization
    activations_bytes: int
    utilization: float | None

    def vllm_bytes(self, gpu_pool_bytes: int) -> int:
        """Weights + KV + activations; with utilization only, that fraction of the pool."""
        if self.kv_bytes is not None:
            return self.weights_bytes + self.kv_bytes + self.activations_bytes
        return max(self.weights_bytes, int((self.utilization or 0.9) * gpu_pool_bytes))


@dataclass(frozen=True)
class Verdict:
    """The guard's answer: fits or not, the figures behind it, and the fix."""

    ok: bool
    host: str
    kind: HostKind
    pool_bytes: int
    need: dict[str, int]  # label -> bytes, in the order the message lists them
    headroom_bytes: int  # the tightest check's headroom
    margin_bytes: int
    largest_kv_bytes: int  # the largest --kv-cache-memory-bytes that passes every check
    serves: dict[str, int] | None  # {seqs, context} the largest cache holds, from plan_memory
    message: str
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "host": self.host,
            "kind": self.kind,
            "pool_bytes": self.pool_bytes,
            "need": dict(self.need),
            "headroom_bytes": self.headroom_bytes,
            "margin_bytes": self.margin_bytes,
            "largest_kv_bytes": self.largest_kv_bytes,
            "serves": self.serves,
            "message": self.message,
            "problems": list(self.problems),
        }


def host_facts(
    *,
    meminfo: str,
    osrelease: str = "",
    kind: str = "auto",
    compute_apps: str = "",
    gpu_total: str = "",
    own_pids: list[int] | None = None,
) -> HostFacts:
    """Parse what the host's files and tools printed into HostFacts."""
    mem = parse_meminfo(meminfo)
    if "MemTotal" not in mem or "MemAvailable" not in mem:
        raise UserError(
            "the memory file has no MemTotal/MemAvailable lines: point the guard at the "
            "host's /proc/meminfo (vllm_serving_memory_meminfo_path)"
        )
    resolved: HostKind = host_kind(osrelease) if kind == "auto" else kind  # type: ignore[assignment]
    return HostFacts(
        kind=resolved,
        mem_total_bytes=mem["MemTotal"],
        mem_available_bytes=mem["MemAvailable"],
        gpu_total_bytes=parse_gpu_total(gpu_total),
        gpu_processes=parse_compute_apps(compute_apps),
        own_pids=frozenset(own_pids or ()),
    )


def planned_facts(kind: HostKind, total_gb: float) -> HostFacts:
    """A host planned from its size alone (`plan guard --total-gb` run off the target): all
    of its memory available, no GPU processes. Only the pool and GPU checks apply to it."""
    total = int(total_gb * GB)
    return HostFacts(kind=kind, mem_total_bytes=total, mem_available_bytes=total, measured=False)


def launch_need(profile: Profile, settings: GuardSettings) -> LaunchNeed:
    """What a launch of `profile` takes, before the host is known."""
    act_gb = settings.activations_gb
    if act_gb is None:
        act_gb = ACTIVATIONS_GB[profile.platform]
    kv = profile.vllm.kv_cache_memory_bytes
    if profile.platform == "cpu":
        space = profile.env.get("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_DEFAULT_GIB))
        kv = int(float(space) * GIB)
    return LaunchNeed(
        weights_bytes=int(profile.weights_gib * GIB),
        kv_bytes=kv,
        activations_bytes=int(act_gb * GB),
        utilization=profile.vllm.gpu_memory_utilization,
    )


def settings_of(source: Any, prefix: str = "memory_") -> GuardSettings:
    """GuardSettings from any object holding its fields as `prefix` + name: the inventory's
    vllm_serving_memory_* (a ServingVars, without vllm_serving_), or `plan guard`'s options
    (prefix "")."""
    return GuardSettings(
        **{f.name: getattr(source, prefix + f.name) for f in fields(GuardSettings)}
    )


def start_context(profile: Profile, serving: Any) -> dict[str, Any]:
    """What templates/serving/memory-guard.sh.j2 needs: the bars for both host kinds."""
    settings = settings_of(serving)
    return {
        "enabled": bool(serving.memory_guard),
        "kind": serving.memory_host_kind,
        "meminfo_path": serving.memory_meminfo_path,
        "bar_native": start_bar_bytes(profile, settings, "native"),
        "bar_wsl2": start_bar_bytes(profile, settings, "wsl2"),
        "margin": int(settings.margin_gb * GB),
    }


def start_bar_bytes(profile: Profile, settings: GuardSettings, kind: HostKind) -> int:
    """MemAvailable, after dropping the page cache, below which vLLM must not start."""
    if kind == "wsl2":
        return int(settings.wsl_linux_gb * GB)
    pool = int((settings.total_gb or GB10_TOTAL_GB) * GB)
    return launch_need(profile, settings).vllm_bytes(pool) + int(settings.margin_gb * GB)


def _gb(value: int) -> str:
    return f"{value / GB:.1f} GB"


def check_launch(
    profile: Profile,
    facts: HostFacts,
    settings: GuardSettings | None = None,
    *,
    host: str = "this host",
    hf_config: dict[str, Any] | None = None,
    seqs: int | None = None,
) -> Verdict:
    """Add up the launch and what must stay; refuse below the margin (see the module doc)."""
    settings = settings or GuardSettings()
    need = launch_need(profile, settings)
    margin = int(settings.margin_gb * GB)
    wsl = facts.kind == "wsl2"
    if settings.total_gb is not None:
        pool = int(settings.total_gb * GB)
    else:
        pool = int(GB10_TOTAL_GB * GB) if wsl else facts.mem_total_bytes
    refuse_impossible(profile, settings, pool, wsl)
    reserve = int((settings.windows_share_gb if wsl else settings.os_reserve_gb) * GB)
    others = facts.others()
    other_bytes = sum(p.used_bytes or 0 for p in others)
    gpu_pool = facts.gpu_total_bytes or (pool - reserve if wsl else facts.mem_total_bytes)
    vllm = need.vllm_bytes(gpu_pool)

    parts: dict[str, int] = {"weights": need.weights_bytes}
    if need.kv_bytes is not None:
        parts["KV cache"] = need.kv_bytes
        parts["activations and CUDA graphs"] = need.activations_bytes
    else:
        parts[f"KV cache and activations (utilization {need.utilization or 0.9:g})"] = (
            vllm - need.weights_bytes
        )
    parts["Windows share" if wsl else "OS reserve"] = reserve
    parts["other GPU processes"] = other_bytes

    # (name, limit, what else must fit beside vLLM in it, and what that is)
    kept = "the Windows share" if wsl else "the OS reserve"
    checks = [("memory", pool, reserve + other_bytes, f"{kept} and other GPU processes")]
    if facts.gpu_total_bytes is not None:
        checks.append(("GPU memory", facts.gpu_total_bytes, other_bytes, "other GPU processes"))
    # What this stack's running vLLM holds comes back on a redeploy; where the driver does not
    # say how much, what is available now is unknowable here and memory-guard.sh decides at
    # start (after the old vLLM stopped).
    check_now = not wsl and facts.measured and not facts.own_unreported()
    if check_now:
        now = facts.mem_available_bytes + facts.own_gpu_bytes()
        checks.append(("available memory", now, 0, ""))
    # What a sized cache costs besides itself (weights, activations) gives the largest cache.
    fixed = need.weights_bytes + need.activations_bytes
    problems: list[str] = []
    headroom: int | None = None
    largest: int | None = None
    for name, limit, others_there, what in checks:
        left = limit - others_there - vllm
        headroom = left if headroom is None else min(headroom, left)
        room = limit - others_there - fixed - margin
        largest = room if largest is None else min(largest, room)
        if left < margin:
            kept_back = f" less {_gb(others_there)} for {what}" if others_there else ""
            problems.append(
                f"{name} {_gb(limit)}{kept_back} less the launch's {_gb(vllm)} leaves "
                f"{_gb(left)}, under the {_gb(margin)} margin"
            )
    assert headroom is not None and largest is not None
    largest = max(0, largest) // MIB * MIB
    sized_right = not problems
    if wsl and facts.mem_available_bytes < int(settings.wsl_linux_gb * GB):
        problems.append(
            f"WSL2's Linux side has {_gb(facts.mem_available_bytes)} available, under "
            f"{settings.wsl_linux_gb:g} GB"
        )

    verdict = Verdict(
        ok=not problems,
        host=host,
        kind=facts.kind,
        pool_bytes=pool,
        need=parts,
        headroom_bytes=headroom,
        margin_bytes=margin,
        largest_kv_bytes=largest,
        serves=_serves(profile, hf_config, largest, seqs) if largest else None,
        message="",
        problems=problems,
    )
    message = _message(profile, verdict, others, need, sized_right)
    if not wsl and not check_now and facts.measured:
        message += (
            " (available memory not checked: this stack's running vLLM does not report its "
            "memory; memory-guard.sh checks it when the new one starts)"
        )
    return replace(verdict, message=message)


def _setting(name: str) -> str:
    """A guard setting as the user gave it: `plan guard`'s option and the inventory's name."""
    return f"--{name.replace('_', '-')}, vllm_serving_memory_{name}"


def refuse_impossible(profile: Profile, settings: GuardSettings, pool: int, wsl: bool) -> None:
    """Settings no host can have, refused before the sum: a GB10 larger than 128 GB, or a
    figure kept back from the launch (the Windows share, the OS reserve, the margin) as large
    as the whole host. Summed, they read as a launch that does not fit, and the guard's fix
    ("use smaller (quantised) weights") sent the user after the wrong thing."""
    if profile.platform == "gb10" and settings.total_gb and settings.total_gb > GB10_TOTAL_GB:
        raise UserError(
            f"the host's memory {settings.total_gb:,.6g} GB ({_setting('total_gb')}) is more "
            f"than a GB10 has ({GB10_TOTAL_GB:g} GB; an RTX Spark 64 or 128): give its decimal "
            "GB, 128 or 64" + ("; did you give MB?" if settings.total_gb >= 1000 else "")
        )
    host = f"the host's {pool / GB:,.6g} GB"
    kept = [
        ("Windows share", "windows_share_gb", "what Windows and WSL2's Linux keep, ~32 GB on "
         "a 128 GB RTX Spark whose GPU has 96 GB") if wsl else
        ("OS reserve", "os_reserve_gb", "what the OS and its services keep, ~12 GB"),
        ("margin", "margin_gb", "what must stay free after the launch, ~4 GB"),
        ("activations allowance", "activations_gb", "activations and CUDA graphs, ~10 GB"),
    ]  # fmt: skip
    if wsl:
        kept.append(("Linux side's minimum", "wsl_linux_gb", "WSL2's MemAvailable, ~8 GB"))
    for label, name, meaning in kept:
        value = getattr(settings, name)
        if value is not None and value * GB >= pool:
            raise UserError(
                f"the {label} {value:,.6g} GB ({_setting(name)}) is not less than {host}: it is "
                f"{meaning}; give decimal GB, well under the host's memory"
                + ("; did you give MB?" if value >= 1000 else "")
            )
    label, name, _meaning = kept[0]
    reserve = getattr(settings, name)
    if (reserve + settings.margin_gb) * GB >= pool:
        raise UserError(
            f"the {label} {reserve:g} GB and the margin {settings.margin_gb:g} GB leave nothing "
            f"of {host} for vLLM: lower them ({_setting(name)}; {_setting('margin_gb')})"
        )


def profiles_that_fit(
    profile: Profile,
    facts: HostFacts,
    settings: GuardSettings,
    candidates: list[Profile],
) -> list[Profile]:
    """The bundled profiles of `profile`'s platform that pass every check on this host (the
    guard names them when `profile` does not fit: a 64 GB RTX Spark cannot take the 128 GB
    profiles' 60 GiB cache). Same model first, then by name."""
    fits = [
        c
        for c in candidates
        if c.platform == profile.platform
        and c.name != profile.name
        and check_launch(c, facts, settings).ok
    ]
    return sorted(fits, key=lambda c: (c.model != profile.model, c.name))


def _serves(
    profile: Profile, hf_config: dict[str, Any] | None, kv_bytes: int, seqs: int | None
) -> dict[str, int] | None:
    """Sequences of max_model_len tokens a `kv_bytes` cache holds, through plan_memory."""
    config = hf_config or profile.hf_config
    if not config:
        return None
    try:
        plan = _plan(profile, config, kv_bytes, seqs)
    except UserError:  # a config the planner cannot read: the verdict stands without a quote
        return None
    return {
        "seqs": plan.seqs_at_context,
        "context": plan.context,
        "usable_context_at_seqs": plan.usable_ctx_per_seq or 0,
        "at_seqs": plan.seqs,
    }


def _plan(profile: Profile, config: dict[str, Any], kv_bytes: int, seqs: int | None) -> MemoryPlan:
    """plan_memory for the profile's weights plus a `kv_bytes` cache (auto KV dtype: bf16)."""
    dtype = profile.vllm.kv_cache_dtype or "bf16"
    dtype = "bf16" if dtype in ("auto", "bfloat16") else dtype
    weights_gb = profile.weights_gib * GIB / GB
    return plan_memory(
        config,
        kv_dtype=dtype,
        memory_gb=weights_gb + kv_bytes / GB,
        weights_gb=weights_gb,
        seqs=seqs or profile.vllm.max_num_seqs,
        context=profile.vllm.max_model_len,
    )


def _message(
    profile: Profile,
    verdict: Verdict,
    others: list[GpuProcess],
    need: LaunchNeed,
    sized_right: bool,
) -> str:
    """One line for `verdict`: the sum, and either "fits" or the refusal with its fix."""
    problems, largest, serves = verdict.problems, verdict.largest_kv_bytes, verdict.serves
    total = sum(verdict.need.values())
    summed = " + ".join(f"{label} {_gb(value)}" for label, value in verdict.need.items())
    head = (
        f"{verdict.host}: {profile.name} needs {summed} = {_gb(total)} of {_gb(verdict.pool_bytes)}"
    )
    if not problems:
        return f"{head}: fits"
    if sized_right:  # only the Linux side of WSL2 is short: the launch itself fits
        return (
            f"{head}: refused, {'; '.join(problems)}. Fix: close programs in Windows and WSL, "
            "or give WSL more memory in .wslconfig"
        )
    if largest <= 0:
        kept = next(label for label in verdict.need if label in ("Windows share", "OS reserve"))
        fix = (
            "the weights and activations alone leave no room for a KV cache: use smaller "
            f"(quantised) weights, or free memory (check the {kept} of "
            f"{_gb(verdict.need[kept])} too)"
        )
    elif need.kv_bytes is None:
        fix = (
            f"size the cache directly with vllm.kv_cache_memory_bytes: {largest} "
            f"({largest / GIB:.1f} GiB) or less"
        )
    else:
        fix = (
            f"set vllm.kv_cache_memory_bytes to {largest} ({largest / GIB:.1f} GiB) or less"
            if profile.platform == "gb10"
            else f"set env VLLM_CPU_KVCACHE_SPACE to {largest // GIB} (GiB) or less"
        )
    if serves:
        fix += (
            f", which holds {serves['seqs']:,} sequences x {serves['context']:,} tokens "
            f"({serves['at_seqs']:,} sequences x {serves['usable_context_at_seqs']:,} tokens)"
        )
    if others:
        fix += (
            ", or stop the other GPU processes ("
            + ", ".join(f"{p.pid} {p.name}" for p in others)
            + ")"
        )
    return f"{head}: refused, {'; '.join(problems)}. Fix: {fix}"
