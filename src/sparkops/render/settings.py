"""The deployment settings an inventory gives, validated by pydantic (role-prefixed keys).

Ansible variables `vllm_serving_*`, `litellm_router_*` and `ray_cluster_*` map onto the three
models below with the prefix removed; an unknown key under a known prefix is refused (a typo
would otherwise fall back to a default silently). The defaults here are the documented
defaults of the roles (ansible/roles/*/defaults/main.yml mirror them, names and values, checked
by tests/unit/test_inventory_role_specs.py): `sparkops render` applies these where Ansible
applies the roles'.
"""

from __future__ import annotations

import difflib
import ipaddress
import warnings
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sparkops.errors import UserError
from sparkops.render import envfile
from sparkops.versions import LITELLM_VERSION


def _env_carries(value: str) -> str:
    """A secret the env file (render/envfile.py) carries unchanged; the message never shows it."""
    try:
        envfile.quote(value)
    except envfile.EnvValueError as err:
        raise ValueError(f"the value {err}: write it on one line") from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServingVars(_Strict):
    """vllm_serving_*: what runs on every serving host."""

    # None: follow the inventory's sparkops_topology, else single. Spelt like it (TOPOLOGY_OF);
    # data-parallel / pipeline-parallel are deprecated spellings (DEPRECATED_TOPOLOGIES).
    topology: (
        Literal[
            "single",
            "wsl2",
            "local",
            "pair-dp",
            "pair-pp",
            "multi-dp",
            "data-parallel",
            "pipeline-parallel",
        ]
        | None
    ) = None
    profile: str = "gb10-gemma4-12b-fp8"
    # Empty: the profile's `image`, else the kit's image for its platform (stack.KIT_IMAGES).
    image: str = ""
    port: int = Field(default=8000, ge=1, le=65535)
    bind_address: str = "127.0.0.1"
    allow_public_bind: bool = False
    stack_dir: str = "/opt/sparkops/serving"
    hf_cache: str = "/var/lib/sparkops/hf-cache"
    model_dir: str = ""
    # The deploy downloads a hub model on the host before vLLM starts, which then runs offline;
    # false: vLLM downloads it itself at start.
    model_download: bool = True
    concurrency: int | None = Field(default=None, gt=0)
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    hf_token: str = ""
    api_key: str = ""
    ready_timeout: int = Field(default=900, gt=0)
    start_period: int = Field(default=300, ge=0)
    gpus: bool = True
    # Locked-memory limit for the container (-1: unlimited, what RDMA/NCCL need on a Spark);
    # None leaves Docker's default, for engines that may not raise it (no CAP_SYS_RESOURCE).
    memlock: int | None = -1
    extra_env: dict[str, str] = Field(default_factory=dict)
    # Further read-only bind mounts, host path = container path (e.g. a local vLLM build).
    extra_volumes: list[str] = Field(default_factory=list)
    # Compose project name (containers are <project>-vllm-1, <project>-router-1).
    project: str = Field(default="sparkops", pattern=r"^[a-z0-9][a-z0-9_-]*$")
    # Build a missing kit image (sparkops/vllm:gb10, sparkops/litellm:local) on the host before
    # `compose up`, for the engine's own architecture; false: only check the images.
    build_images: bool = True
    # Where the deploy copies the docker/ build folders on the host.
    build_dir: str = "/opt/sparkops/build"
    # docker/vllm's base: an arm64 vLLM image and its digest (required to build: a moving tag
    # changed vLLM's defaults under other kits). Read it with `docker buildx imagetools inspect`.
    # Empty: the profile's base_image, else the upstream image of the kit's vLLM pin
    # (src/sparkops/versions.env); render.stack.plan_stack decides (effective_base).
    base_image: str = ""
    base_digest: str = Field(default="", pattern=r"^(sha256:[0-9a-f]{64})?$")
    # The whole-host memory guard (sparkops.plan.guard): decimal GB; see the role's defaults.
    memory_guard: bool = True
    memory_host_kind: Literal["auto", "native", "wsl2"] = "auto"
    memory_total_gb: float | None = Field(default=None, gt=0)
    memory_os_reserve_gb: float = Field(default=12.0, ge=0)
    memory_windows_share_gb: float = Field(default=32.0, ge=0)
    memory_activations_gb: float | None = Field(default=None, ge=0)
    memory_margin_gb: float = Field(default=4.0, ge=0)
    memory_wsl_linux_gb: float = Field(default=8.0, ge=0)
    memory_meminfo_path: str = Field(default="/proc/meminfo", pattern=r"^/[^\s'\"$`\\]*$")
    memory_nvidia_smi: str = Field(default="nvidia-smi", pattern=r"^[^\s'\"$`\\]+$")

    @field_validator("model_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError(
                f"'{value}' must be an absolute path (it is bind-mounted): write it absolute, "
                "or, where it is built from SPARKOPS_CACHE, set an absolute SPARKOPS_CACHE"
            )
        return value

    @field_validator("extra_volumes")
    @classmethod
    def _absolute_all(cls, values: list[str]) -> list[str]:
        for value in values:
            if not value.startswith("/") or ":" in value:
                raise ValueError(f"'{value}' must be an absolute path without ':' options")
        return values

    @field_validator("bind_address")
    @classmethod
    def _address(cls, value: str) -> str:
        ipaddress.ip_address(value)
        return value

    @field_validator("hf_token", "api_key")
    @classmethod
    def _secret(cls, value: str) -> str:
        return _env_carries(value)


class RouterVars(_Strict):
    """litellm_router_*: the LiteLLM proxy in front of data-parallel replicas."""

    image: str = "sparkops/litellm:local"
    # docker/litellm's Python base image and the LiteLLM release it installs.
    base_image: str = "python:3.12-slim"
    # Empty: the kit's LiteLLM pin (src/sparkops/versions.env).
    version: str = Field(default="", pattern=r"^([0-9][0-9A-Za-z.+-]*)?$", validate_default=True)
    port: int = Field(default=4000, ge=1, le=65535)
    bind_address: str = "127.0.0.1"
    model_name: str = ""
    master_key: str = ""
    routing_strategy: Literal["simple-shuffle", "least-busy", "latency-based-routing"] = (
        "simple-shuffle"
    )

    @field_validator("master_key")
    @classmethod
    def _secret(cls, value: str) -> str:
        return _env_carries(value)

    @field_validator("version")
    @classmethod
    def _pinned_version(cls, value: str) -> str:
        return value or LITELLM_VERSION

    num_retries: int = Field(default=2, ge=0)
    timeout: int = Field(default=600, gt=0)
    allowed_fails: int = Field(default=3, ge=0)
    cooldown_time: int = Field(default=30, ge=0)
    health_check_interval: int = Field(default=30, gt=0)


class RayVars(_Strict):
    """ray_cluster_*: the pipeline-parallel pair over the QSFP link."""

    backend: Literal["ray", "mp"] = "ray"
    port: int = Field(default=6379, ge=1, le=65535)
    master_port: int = Field(default=29501, ge=1, le=65535)
    interface: str = "enp1s0f1np1"
    address: str = ""
    ib_hca: str = "rocep1s0f1,roceP2p1s0f1"
    num_cpus: int | None = Field(default=None, gt=0)
    object_store_bytes: int = Field(default=1073741824, gt=0)
    wait_timeout: int = Field(default=600, gt=0)


# One topology vocabulary, the inventory's: every example inventory names its shape in
# `sparkops_topology`, and `vllm_serving_topology` (an override) takes the same words. Each
# maps to the serving shape the templates render (single, data-parallel, pipeline-parallel:
# internal names, not typed by users).
TOPOLOGY_OF = {
    "single": "single",
    "wsl2": "single",
    "local": "single",
    "pair-dp": "data-parallel",
    "pair-pp": "pipeline-parallel",
    "multi-dp": "data-parallel",
}


# vllm_serving_topology's former spellings: still accepted, with a warning naming the word.
DEPRECATED_TOPOLOGIES = {
    "data-parallel": "multi-dp (pair-dp for two Sparks on one QSFP cable)",
    "pipeline-parallel": "pair-pp",
}


def topology_named(hostvars: dict) -> tuple[str, str]:
    """The variable that names a host's topology and its word as the user wrote it
    (vllm_serving_topology when set, else sparkops_topology, else single): what messages
    quote, since the serving shapes are internal names."""
    explicit = hostvars.get("vllm_serving_topology")
    if explicit:
        return "vllm_serving_topology", str(explicit)
    return "sparkops_topology", str(hostvars.get("sparkops_topology", "single"))


def _check_word(variable: str, word: str) -> None:
    """Refuse a topology word the kit does not know (`singel`, `pair_pp`), naming the valid
    ones and the closest: a misspelt word must not fall back to a single stack."""
    if word in TOPOLOGY_OF or (
        variable == "vllm_serving_topology" and word in DEPRECATED_TOPOLOGIES
    ):
        return
    close = difflib.get_close_matches(word.replace("_", "-").lower(), TOPOLOGY_OF, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise UserError(
        f"{variable} '{word}' is not a topology{hint}: set it to one of "
        f"{', '.join(TOPOLOGY_OF)} in the inventory's group_vars"
    )


def serving_topology(hostvars: dict) -> str:
    """The serving shape vllm_serving_topology names if set, else the one sparkops_topology
    implies, else single. An unknown word is refused with the valid ones."""
    variable, word = topology_named(hostvars)
    _check_word(variable, word)
    if variable == "vllm_serving_topology" and word in DEPRECATED_TOPOLOGIES:
        warnings.warn(
            f"vllm_serving_topology: {word} is deprecated, write "
            f"{DEPRECATED_TOPOLOGIES[word]}, as sparkops_topology does",
            FutureWarning,
            stacklevel=2,
        )
        return word
    return TOPOLOGY_OF[word]


PREFIXES: dict[str, type[BaseModel]] = {
    "vllm_serving_": ServingVars,
    "litellm_router_": RouterVars,
    "ray_cluster_": RayVars,
}


# Public role settings only Ansible reads (the renderer has no use for them): an inventory
# may set them (vllm_serving_update_base: true), and `sparkops render` must not call them
# typos. The render filter (ansible/plugins/filter/sparkops_render.py) leaves out the same.
ANSIBLE_ONLY = frozenset(
    {
        "vllm_serving_use_systemd",
        "vllm_serving_stack_record",
        "vllm_serving_min_shm_mib",
        "vllm_serving_model_download_timeout",
        "vllm_serving_base_lock",
        "vllm_serving_update_base",
        "vllm_serving_restart_running_jobs",
        "vllm_serving_model_copy",
        "vllm_serving_model_copy_address",
        "vllm_serving_model_copy_port",
    }
)


def split_prefixed(host: str, hostvars: dict) -> dict[str, BaseModel]:
    """Validate one host's role-prefixed variables into the three settings models."""
    out: dict[str, BaseModel] = {}
    for prefix, model in PREFIXES.items():
        data = {
            k[len(prefix) :]: v
            for k, v in hostvars.items()
            if k.startswith(prefix) and k not in ANSIBLE_ONLY
        }
        try:
            out[prefix] = model.model_validate(data)
        except ValidationError as err:
            details = "; ".join(
                f"{prefix}{'.'.join(str(x) for x in e['loc'])}: "
                + (
                    "unknown variable (check its spelling)"
                    if e["type"] == "extra_forbidden"
                    else e["msg"]
                )
                for e in err.errors()
            )
            raise UserError(
                f"inventory host {host}: {details}. Fix the inventory's group_vars."
            ) from None
    return out
