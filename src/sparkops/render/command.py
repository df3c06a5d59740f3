"""The vLLM and Ray command lines, built from a profile (pure; one source for every reader).

Compose files, systemd units, the Ansible roles and the tests all take their commands from
here through `templates/`, so a flag is spelt once. The flag order follows the seed's
recommended command, so a rendered GB10 command reads flag for flag like it.
"""

from __future__ import annotations

import json

from sparkops.profiles import Profile, async_scheduling_flag
from sparkops.profiles.checks import pipeline_parallel_size

# How each platform's image starts vLLM. The CPU build's `vllm` console script looks up a
# distribution called "vllm" and fails, so it runs the API server module directly.
LAUNCHERS = {
    "gb10": ["vllm", "serve"],
    "cpu": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model"],
}


def engine_flags(profile: Profile, *, pipeline_parallel: int = 1) -> list[str]:
    """The profile's engine settings as vLLM flags, in the seed's order.

    `pipeline_parallel` is the stage count the topology adds: with more than one stage
    `--async-scheduling` is left to vLLM (see `profiles.checks.async_scheduling_flag`).
    """
    args = profile.vllm
    flags = ["--served-model-name", profile.served_model_name]
    flags += ["--max-model-len", str(args.max_model_len)]
    if args.gpu_memory_utilization is not None:
        flags += ["--gpu-memory-utilization", f"{args.gpu_memory_utilization:.2f}"]
    if args.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(args.kv_cache_memory_bytes)]
    if args.kv_cache_dtype is not None:
        flags += ["--kv-cache-dtype", args.kv_cache_dtype]
    if args.max_num_batched_tokens is not None:
        flags += ["--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    flags += ["--max-num-seqs", str(args.max_num_seqs)]
    flags.append(
        "--enable-prefix-caching" if args.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    if args.prefix_caching_hash_algo is not None:
        flags += ["--prefix-caching-hash-algo", args.prefix_caching_hash_algo]
    if async_scheduling_flag(profile, pipeline_parallel):
        flags.append("--async-scheduling")
    if args.limit_mm_per_prompt is not None:
        flags += [
            "--limit-mm-per-prompt",
            json.dumps(args.limit_mm_per_prompt, separators=(",", ":")),
        ]
    if args.seed is not None:
        flags += ["--seed", str(args.seed)]
    if args.enforce_eager:
        flags.append("--enforce-eager")
    if args.enable_prompt_tokens_details:  # the kit's addition, after the seed's flags
        flags.append("--enable-prompt-tokens-details")
    return flags + list(args.extra_args)


def serve_command(
    profile: Profile,
    *,
    model: str,
    host: str,
    port: int,
    parallel: list[str] | None = None,
) -> list[str]:
    """The full argv that starts the OpenAI-compatible server for this profile."""
    stages = pipeline_parallel_size(parallel or [])
    return [
        *LAUNCHERS[profile.platform],
        model,
        *engine_flags(profile, pipeline_parallel=stages),
        "--host",
        host,
        "--port",
        str(port),
        *(parallel or []),
    ]


def ray_parallel_flags() -> list[str]:
    """Pipeline parallel over a Ray cluster (head runs vLLM; Ray places stage 2 on the worker)."""
    return [
        "--tensor-parallel-size",
        "1",
        "--pipeline-parallel-size",
        "2",
        "--distributed-executor-backend",
        "ray",
    ]


def native_parallel_flags(*, rank: int, master_addr: str, master_port: int) -> list[str]:
    """vLLM's own multi-node mode (no Ray; recent images ship without it): worker is headless."""
    flags = [
        "--tensor-parallel-size",
        "1",
        "--pipeline-parallel-size",
        "2",
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--master-addr",
        master_addr,
        "--master-port",
        str(master_port),
    ]
    return [*flags, "--headless"] if rank else flags
