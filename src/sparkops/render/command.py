"""The vLLM and Ray command lines, built from a profile (pure; one source for every reader).

Compose files, systemd units, the Ansible roles and the tests all take their commands from
here through `templates/`, and the local vLLM-CPU servers (`sparkops local up`, the demo, the
tests' fixtures) through `local_command`, so a flag is spelt once. The flag order follows the seed's
recommended command, so a rendered GB10 command reads flag for flag like it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from sparkops.profiles import Profile, VllmArgs, async_scheduling_flag

# How each platform's image starts vLLM. The CPU build's `vllm` console script looks up a
# distribution called "vllm" and fails, so it runs the API server module directly.
CPU_ENTRYPOINT = "vllm.entrypoints.openai.api_server"
LAUNCHERS = {
    "gb10": ["vllm", "serve"],
    "cpu": ["python3", "-m", CPU_ENTRYPOINT, "--model"],
}
# The headless worker of vLLM's native multi-node mode: only `vllm serve` honours --headless
# (the API server module ignores it, starts an engine of its own on the worker and dies with
# "collective_rpc should not be called on follower node"), and the CPU build's `vllm serve`
# needs the version of a distribution called "vllm" (it ships as vllm-cpu): the shim answers
# what vLLM's own platform check falls back to ("<vllm-cpu version>+cpu"). Same length as
# the CPU launcher, so the compose file splits entrypoint and arguments at the same place.
CPU_HEADLESS_LAUNCHER = [
    "python3",
    "-c",
    "import importlib.metadata as m, sys; v = m.version; "
    "m.version = lambda d: v('vllm-cpu') + '+cpu' if d == 'vllm' else v(d); "
    "sys.argv = ['vllm', 'serve', *sys.argv[1:]]; "
    "from vllm.entrypoints.cli.main import main; main()",
    "--model",
]


def engine_flags(profile: Profile, *, pipeline_parallel: int | None = None) -> list[str]:
    """The profile's engine settings as vLLM flags, in the seed's order.

    `pipeline_parallel` is the stage count the stack runs (None: the profile's own): with
    more than one stage `--async-scheduling` is left to vLLM (see
    `profiles.checks.async_scheduling_flag`).
    """
    return vllm_flags(
        profile.served_model_name,
        profile.vllm,
        async_scheduling=async_scheduling_flag(profile, pipeline_parallel),
    )


def vllm_flags(served_model_name: str, args: VllmArgs, *, async_scheduling: bool) -> list[str]:
    """Engine settings as vLLM flags, in the seed's order: the one spelling of each flag.

    A profile always sets `max_model_len` and `max_num_seqs` (the schema requires them); the
    local server leaves them None when the user gave none, so vLLM's own default applies.
    """
    flags = ["--served-model-name", served_model_name]
    if args.max_model_len is not None:
        flags += ["--max-model-len", str(args.max_model_len)]
    if args.gpu_memory_utilization is not None:
        flags += ["--gpu-memory-utilization", f"{args.gpu_memory_utilization:.2f}"]
    if args.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(args.kv_cache_memory_bytes)]
    if args.kv_cache_dtype is not None:
        flags += ["--kv-cache-dtype", args.kv_cache_dtype]
    if args.max_num_batched_tokens is not None:
        flags += ["--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    if args.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(args.max_num_seqs)]
    flags.append(
        "--enable-prefix-caching" if args.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    if args.prefix_caching_hash_algo is not None:
        flags += ["--prefix-caching-hash-algo", args.prefix_caching_hash_algo]
    if async_scheduling:
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
    stages: int | None = None,
) -> list[str]:
    """The full argv that starts the OpenAI-compatible server for this profile: `parallel`
    the multi-node flags (`ray_parallel_flags`, `native_parallel_flags`) of a stack of
    `stages` pipeline stages (None: the profile's own), the number the flags were made from,
    never read back out of them."""
    headless_cpu = profile.platform == "cpu" and "--headless" in (parallel or [])
    return [
        *(CPU_HEADLESS_LAUNCHER if headless_cpu else LAUNCHERS[profile.platform]),
        model,
        *engine_flags(profile, pipeline_parallel=stages),
        "--host",
        host,
        "--port",
        str(port),
        *(parallel or []),
    ]


class LocalServing(Protocol):
    """What a local vLLM-CPU server's command is made of, besides where it runs: the settings
    of `sparkops local up` (local.server.ServerSettings is one; render may not import local,
    so this names the fields it reads)."""

    @property
    def model(self) -> str:
        """The served model name."""
        ...

    @property
    def host(self) -> str: ...

    @property
    def max_num_seqs(self) -> int | None:
        """None leaves vLLM's default."""
        ...

    @property
    def eager(self) -> bool:
        """Skip torch.compile."""
        ...

    @property
    def dtype(self) -> str:
        """The compute dtype (`--dtype`)."""
        ...

    @property
    def extra_args(self) -> Sequence[str]:
        """Flags appended last, so they override anything before them."""
        ...


def local_command(python: str, model_dir: str, port: int, settings: LocalServing) -> list[str]:
    """The vLLM-CPU server the kit starts as a process of its own (`sparkops local up`).

    The CPU image's launcher run by the given interpreter (the vLLM-CPU venv's), prefix caching
    with xxhash and cached-token counts in usage, as every profile has, in `settings.dtype`
    (ServerSettings says why float32). `settings.eager` skips
    torch.compile: for the 2-layer tiny model compiling buys nothing measurable but costs 20 s
    (idle machine) to 150 s (loaded) of every start.
    """
    # model_construct: no validation, so the two settings a profile must fix may stay None
    # (which the types of a validated profile do not allow: hence the two ignores).
    args = VllmArgs.model_construct(
        max_model_len=None,  # type: ignore[arg-type]
        max_num_seqs=settings.max_num_seqs,  # type: ignore[arg-type]
        enable_prefix_caching=True,
        prefix_caching_hash_algo="xxhash",
        enforce_eager=settings.eager,
        extra_args=list(settings.extra_args),
    )
    return [
        python,
        *LAUNCHERS["cpu"][1:],
        model_dir,
        "--host",
        settings.host,
        "--port",
        str(port),
        "--dtype",
        settings.dtype,
        *vllm_flags(settings.model, args, async_scheduling=False),
    ]


def ray_parallel_flags(stages: int) -> list[str]:
    """Pipeline parallel over a Ray cluster (head runs vLLM; Ray places the other stages on
    the workers), one stage per node."""
    return [
        "--tensor-parallel-size",
        "1",
        "--pipeline-parallel-size",
        str(stages),
        "--distributed-executor-backend",
        "ray",
    ]


def native_parallel_flags(
    *, stages: int, rank: int, master_addr: str, master_port: int
) -> list[str]:
    """vLLM's own multi-node mode (no Ray; recent images ship without it), one stage per
    node: every node but the first is headless."""
    flags = [
        "--tensor-parallel-size",
        "1",
        "--pipeline-parallel-size",
        str(stages),
        "--nnodes",
        str(stages),
        "--node-rank",
        str(rank),
        "--master-addr",
        master_addr,
        "--master-port",
        str(master_port),
    ]
    return [*flags, "--headless"] if rank else flags
