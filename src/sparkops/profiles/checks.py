"""Deployment-time rules for a profile, checked before any file is written or service started.

Each rule comes from the seed's measurements on a GB10:
- `--max-num-seqs` must cover the requests the job keeps in flight (more only wait);
- a KV cache above 54 GiB started only with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True;
- weights + KV cache must fit the host's GPU memory budget (96 GB on the laptop);
- a gated model needs a Hugging Face token, or the download fails after start-up;
- on vLLM-CPU, pipeline parallelism needs compilation on: an eager CPU worker skips the
  warm-up that allocates the later stages' buffers, and every request then fails (HTTP 500,
  `assert self.intermediate_tensors is not None`; found by the kit's one-node PP=2 test);
- pipeline parallelism and `--async-scheduling` (see `async_scheduling_flag`): vLLM 0.32's
  model runner V1 refuses the pair at start-up, and V1 is picked whenever runner V2 lacks
  Triton or a feature the model needs.
Pure functions: the facts about the host and job come in as `DeployFacts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkops.errors import UserError
from sparkops.profiles.schema import Profile
from sparkops.units import EXPANDABLE_SEGMENTS_ABOVE_BYTES as EXPANDABLE_LIMIT_BYTES
from sparkops.units import GIB


@dataclass(frozen=True)
class DeployFacts:
    """What the profile is checked against: the job and the host it will run on."""

    host: str = "this host"
    concurrency: int | None = None
    gpu_memory_gib: float | None = None
    hf_token: bool = False
    # Pipeline stages the stack runs, as the renderer decided them (render.stack: the
    # topology's stages or the profile's own `--pipeline-parallel-size`); None: the
    # profile's own flag alone (`pipeline_stages`).
    pipeline_parallel: int | None = None


def memory_need_bytes(profile: Profile, gpu_memory_gib: float, stages: int = 1) -> int:
    """Weights plus KV cache in bytes on one host: the one place to switch over to
    sparkops.plan.memory.

    With `--kv-cache-memory-bytes` vLLM takes exactly that much; without it, it takes
    `gpu_memory_utilization` of the budget for weights and cache together. Both are per GPU,
    and with pipeline parallelism each of the `stages` hosts holds its share of the layers.
    """
    weights = int(profile.weights_gib * GIB / stages)
    args = profile.vllm
    if args.kv_cache_memory_bytes is not None:
        return weights + args.kv_cache_memory_bytes
    utilization = args.gpu_memory_utilization or 0.9
    return max(weights, int(utilization * gpu_memory_gib * GIB))


def _expandable(profile: Profile) -> bool:
    return "expandable_segments:True" in profile.env.get("PYTORCH_CUDA_ALLOC_CONF", "")


def pipeline_stages(profile: Profile, topology_stages: int = 1) -> int:
    """The pipeline stages a stack of this profile runs: the topology's, or more where the
    profile's own extra flags ask for them. Decided once, by whoever plans the stack; every
    later reader (the command line, the rules below) is handed the number."""
    return max(topology_stages, pipeline_parallel_size(profile.vllm.extra_args))


def pipeline_parallel_size(extra_args: list[str]) -> int:
    """The `--pipeline-parallel-size` / `-pp` value among extra flags (1 when absent)."""
    size = 1
    for i, arg in enumerate(extra_args):
        flag, _, value = arg.partition("=")
        if flag in ("--pipeline-parallel-size", "-pp"):
            if not value and i + 1 < len(extra_args):
                value = extra_args[i + 1]
            if value.isdigit():
                size = int(value)
    return size


V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def pins_v2_runner(profile: Profile) -> bool:
    """Whether the profile pins vLLM's model runner V2 (VLLM_USE_V2_MODEL_RUNNER=1/true)."""
    return profile.env.get(V2_RUNNER_ENV, "").strip().lower() in ("1", "true")


def async_scheduling_flag(profile: Profile, pipeline_parallel: int | None = None) -> bool:
    """Whether the rendered command passes `--async-scheduling` (the kit's decision for PP).

    With pipeline parallelism the explicit flag is dropped and vLLM's own default decides
    (`async_scheduling` unset): vLLM 0.32 then turns async scheduling on whenever model runner
    V2 serves the model and off, with a warning, when it falls back to runner V1. Passing the
    flag instead makes the V1 fallback a start-up failure ("Model Runner V1 does not support:
    pipeline parallelism with async scheduling"), and pinning VLLM_USE_V2_MODEL_RUNNER=1 makes
    every feature V2 lacks one: both trade a working pair for a few percent of overlap. A
    profile that pins V2 itself (env VLLM_USE_V2_MODEL_RUNNER: "1") keeps the flag: that is
    the user's explicit choice, and V2 runs PP with async scheduling.

    `pipeline_parallel`: the stages the stack runs (`pipeline_stages`; None: the profile's
    own).
    """
    if not profile.vllm.async_scheduling:
        return False
    stages = pipeline_stages(profile) if pipeline_parallel is None else pipeline_parallel
    return stages <= 1 or pins_v2_runner(profile)


def profile_problems(profile: Profile, facts: DeployFacts) -> list[str]:
    """Every rule the profile breaks on this host and job, each with its fix."""
    name, args = profile.name, profile.vllm
    problems: list[str] = []
    if facts.concurrency is not None and facts.concurrency > args.max_num_seqs:
        problems.append(
            f"max_num_seqs {args.max_num_seqs} is below the job's concurrency "
            f"{facts.concurrency}: raise vllm.max_num_seqs above it (and max_num_batched_tokens "
            "with it) or lower the job's concurrency"
        )
    kv = args.kv_cache_memory_bytes
    if kv is not None and kv > EXPANDABLE_LIMIT_BYTES and not _expandable(profile):
        problems.append(
            f"a KV cache of {kv / GIB:.1f} GiB (above 54 GiB) does not start without "
            "expandable segments: add env PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True "
            "or lower vllm.kv_cache_memory_bytes to 54 GiB or less"
        )
    pp = pipeline_stages(profile) if facts.pipeline_parallel is None else facts.pipeline_parallel
    if profile.platform == "gb10" and facts.gpu_memory_gib is not None:
        need = memory_need_bytes(profile, facts.gpu_memory_gib, pp)
        if need > facts.gpu_memory_gib * GIB:
            share = f"{profile.weights_gib / pp:.1f} GiB, 1/{pp} of " if pp > 1 else ""
            problems.append(
                f"weights ({share}{profile.weights_gib:.1f} GiB) + KV cache need "
                f"{need / GIB:.1f} GiB, "
                f"over {facts.host}'s GPU memory budget of {facts.gpu_memory_gib:.1f} GiB: lower "
                "vllm.kv_cache_memory_bytes, or raise the host's GPU memory (NVIDIA app on the "
                "laptop) and its vllm_serving_gpu_memory_gib in the inventory"
            )
    if pp > 1 and "--async-scheduling" in args.extra_args and not pins_v2_runner(profile):
        problems.append(
            f"pipeline parallel size {pp} with --async-scheduling in vllm.extra_args stops vLLM "
            'at start-up whenever it falls back to model runner V1 ("Model Runner V1 does not '
            'support: pipeline parallelism with async scheduling"): remove it from '
            "extra_args (the kit lets vLLM turn async scheduling on where runner V2 serves), "
            f'or pin runner V2 with env {V2_RUNNER_ENV}: "1"'
        )
    if profile.platform == "cpu" and args.enforce_eager and pp > 1:
        problems.append(
            f"pipeline parallel size {pp} with enforce_eager on vLLM-CPU answers every request "
            "with HTTP 500 (the eager CPU worker skips the warm-up that allocates the later "
            "stages' buffers): set vllm.enforce_eager: false"
        )
    if profile.gated and not facts.hf_token:
        problems.append(
            f"{profile.model} is gated on Hugging Face and no token is set: accept its licence, "
            "then set vllm_serving_hf_token in the inventory's vault (or HF_TOKEN in the "
            "environment of `sparkops render`)"
        )
    return [f"profile {name}: {p}" for p in problems]


def fits_one_host(profile: Profile, gpu_memory_gib: float) -> bool:
    """Whether the whole model, weights and KV cache, fits one host's GPU memory budget:
    then pipeline parallelism only adds the pipeline's bubble and the link's latency, and
    data parallel (a replica per host) serves more."""
    return memory_need_bytes(profile, gpu_memory_gib) <= gpu_memory_gib * GIB


def check_profile(profile: Profile, facts: DeployFacts) -> None:
    """Raise one UserError listing every problem, so the user fixes them all in one pass."""
    problems = profile_problems(profile, facts)
    if problems:
        raise UserError("\n  ".join(["the serving stack cannot start as configured:", *problems]))
