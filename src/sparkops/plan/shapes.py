"""Model shapes for the planners: attention layer groups, KV bytes per token, weight bytes.

A shape comes either from the kit's data file (shapes.yaml: the shipped profiles' models, with
their sources, so `--profile NAME` needs no download) or from a Hugging Face config.json
(through plan.memory.attention_shape, which reads layers, KV heads, head dim and the
sliding-window layout). Groups allow what one uniform layer cannot say: Gemma 4's global layers
have one KV head of 512 with K = V, its sliding layers eight of 256.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkops.errors import UserError
from sparkops.inputs import read_yaml
from sparkops.plan.memory import attention_shape

SHAPES_FILE = Path(__file__).with_name("shapes.yaml")


class LayerGroup(BaseModel):
    """Attention layers that share one KV shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    k_eq_v: bool = False  # one stored vector serves as K and V
    window: int | None = Field(default=None, gt=0)  # sliding window, tokens

    def bytes_per_token(self, width: int) -> int:
        """KV bytes one token costs in these layers (while inside their window)."""
        return self.layers * (1 if self.k_eq_v else 2) * self.kv_heads * self.head_dim * width

    def tokens_held(self, tokens: int) -> int:
        """Tokens of a sequence these layers hold: all of them, or the window's worth."""
        return tokens if self.window is None else min(tokens, self.window)


class ModelShape(BaseModel):
    """What the memory and decode planners need to know about a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    groups: tuple[LayerGroup, ...] = Field(min_length=1)
    weights_gb: float | None = Field(default=None, ge=0)
    block_size: int = Field(default=16, gt=0)
    source: str = ""

    def bytes_per_token(self, width: int) -> int:
        """Every layer's KV bytes for one token: the worst case, the seed table's figure."""
        return sum(g.bytes_per_token(width) for g in self.groups)

    def sequence_bytes(self, tokens: int, width: int) -> int:
        """KV bytes a sequence of `tokens` holds (sliding layers: the window's worth)."""
        return sum(g.bytes_per_token(width) * g.tokens_held(tokens) for g in self.groups)


@cache
def _shipped() -> dict[str, Any]:
    data = read_yaml(SHAPES_FILE, what="model shapes", fix="reinstall the kit (a packaged file)")
    return dict(data.get("models") or {})


def shipped_shape(model: str) -> ModelShape | None:
    """The data file's shape for a profile's `model`, or None when it has none."""
    entry = _shipped().get(model)
    if entry is None:
        return None
    try:
        return ModelShape.model_validate(entry)
    except ValidationError as err:
        raise UserError(f"{SHAPES_FILE}: model {model!r} is malformed ({err})") from None


def profile_shape(name: str) -> tuple[ModelShape, Any]:
    """A profile (by name or path) and its model's shipped shape."""
    from sparkops.profiles import load_profile

    profile = load_profile(name)
    shape = shipped_shape(profile.model)
    if shape is None:
        raise UserError(
            f"the kit ships no shape for profile {name!r}'s model {profile.model!r}: pass the "
            "model's config.json with --config instead"
        )
    return shape, profile


def kv_dtype_of(profile: Any) -> str:
    """A profile's KV-cache dtype in the planners' terms (auto: the bf16 weights' dtype)."""
    dtype = profile.vllm.kv_cache_dtype
    return "bf16" if dtype in (None, "auto", "bfloat16") else "fp8"


def shape_from_config(hf_config: dict[str, Any], weights_gb: float | None = None) -> ModelShape:
    """A Hugging Face config as groups (full-attention layers, sliding ones). Each group stores
    the config's K+V elements per token and layer (MLA: the latent) as one vector."""
    a = attention_shape(hf_config)
    element = {"kv_heads": 1, "head_dim": a.elements_per_layer, "k_eq_v": True}
    groups = []
    if a.full_layers:
        groups.append(LayerGroup(layers=a.full_layers, **element))
    if a.sliding_layers:
        groups.append(LayerGroup(layers=a.sliding_layers, window=a.sliding_window, **element))
    return ModelShape(label="config.json", groups=tuple(groups), weights_gb=weights_gb)
