"""KV-cache memory model: how many tokens and sequences fit beside the weights.

Pure functions over a Hugging Face `config.json` (already parsed into a dict). The deploy
profile validation and `sparkops plan memory` both call `plan_memory`, so a profile that
renders is one the planner agrees fits.

Units: `memory_gb` and `weights_gb` are decimal gigabytes (1e9 bytes), the unit of the seed's
sizing table (0.88 x 128 GB = ~112 GB usable); the recommended `--kv-cache-memory-bytes` is
exact bytes, and the expandable-segments threshold (~54 GiB) is binary, as the seed states it.

Assumptions (stated because the figures depend on them):
- Per token and attention layer, vLLM stores one K and one V vector per KV head:
  2 x kv_heads x head_dim x dtype bytes. MLA models (DeepSeek-V2/V3: `kv_lora_rank`) store one
  compressed latent instead: (kv_lora_rank + qk_rope_head_dim) x dtype bytes.
- `kv_bytes_per_token` counts every layer: it is what a token costs while it is inside every
  layer's attention span, i.e. the worst case, and the figure the seed's table quotes.
- Sliding-window layers (Gemma 2/3 style: `layer_types`, `sliding_window_pattern`) hold at most
  `sliding_window` tokens per sequence. vLLM's hybrid KV-cache manager (v0.10 and later) frees
  blocks that fall out of the window, so per-sequence figures (`usable_ctx_per_seq`,
  `seqs_at_context`) charge sliding layers for min(context, window) tokens only. A bare
  `sliding_window` with no per-layer pattern (Mistral-7B v0.1, Qwen2 with it switched off) is
  treated as full attention: the conservative reading.
- Block granularity (16 or 64 tokens) and activation memory are ignored: the cache size is
  what you pass as `--kv-cache-memory-bytes`, which vLLM uses as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkops.errors import UserError
from sparkops.units import EXPANDABLE_SEGMENTS_ABOVE_BYTES, GB, GIB, MIB

DTYPE_BYTES = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp32": 4,
    "float32": 4,
}


@dataclass(frozen=True)
class AttentionShape:
    """The parts of a model config that decide KV-cache size."""

    layers: int
    full_layers: int
    sliding_layers: int
    sliding_window: int | None
    kv_heads: int
    head_dim: int
    elements_per_layer: int  # K+V elements (or MLA latent) stored per token per layer


@dataclass(frozen=True)
class MemoryPlan:
    """What fits in the memory given to vLLM, and the flags that say so."""

    kv_dtype: str
    kv_bytes_per_token: int
    memory_bytes: int
    weights_bytes: int
    kv_cache_bytes: int
    tokens_that_fit: int
    seqs: int
    context: int
    bytes_per_seq_at_context: int
    usable_ctx_per_seq: int | None  # None: every layer is sliding, so context is unbounded
    seqs_at_context: int
    kv_usage_at_plan: float  # fraction of the cache `seqs` sequences of `context` tokens use
    kv_cache_memory_bytes: int  # value for --kv-cache-memory-bytes
    max_num_seqs: int  # value for --max-num-seqs
    needs_expandable_segments: bool
    full_layers: int
    sliding_layers: int
    sliding_window: int | None
    warnings: tuple[str, ...]

    @property
    def fits(self) -> bool:
        """True when `seqs` sequences of `context` tokens all fit in the cache at once."""
        return self.seqs_at_context >= self.seqs

    @property
    def kv_mb_per_token(self) -> float:
        """KV bytes per token in decimal MB, the unit of the seed's table."""
        return self.kv_bytes_per_token / 1e6

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the derived fields included."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["warnings"] = list(self.warnings)
        out["fits"] = self.fits
        out["kv_mb_per_token"] = self.kv_mb_per_token
        return out


def dtype_bytes(kv_dtype: str) -> int:
    """Bytes per stored element for a KV-cache dtype name (fp8, bf16, fp16, ...)."""
    try:
        return DTYPE_BYTES[kv_dtype.lower()]
    except KeyError:
        raise UserError(
            f"unknown KV-cache dtype {kv_dtype!r}: use one of fp8, bf16, fp16"
        ) from None


def text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The text model's settings: multimodal configs (Gemma 3/4, Llava...) nest them under
    `text_config`; top-level keys fill in what the nested block leaves out."""
    nested = hf_config.get("text_config")
    if isinstance(nested, dict):
        return {**hf_config, **nested}
    return hf_config


def _int_field(cfg: dict[str, Any], key: str) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(
            f"model config has no usable {key!r} (found {value!r}): pass the model's own "
            "Hugging Face config.json (or its text_config)"
        )
    return value


def attention_shape(hf_config: dict[str, Any]) -> AttentionShape:
    """Read layers, KV heads, head dim and sliding-window layout from a config."""
    cfg = text_config(hf_config)
    layers = _int_field(cfg, "num_hidden_layers")
    heads = _int_field(cfg, "num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads") or heads
    if cfg.get("head_dim"):
        head_dim = int(cfg["head_dim"])
    else:
        hidden = _int_field(cfg, "hidden_size")
        if hidden % heads:
            raise UserError(
                f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} and "
                "the config has no head_dim: add head_dim to the config"
            )
        head_dim = hidden // heads

    if cfg.get("kv_lora_rank"):  # MLA: one latent plus the rotary key part, no separate V
        elements = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
    else:
        elements = 2 * int(kv_heads) * head_dim

    sliding_layers = _count_sliding_layers(cfg, layers)
    window = int(cfg["sliding_window"]) if sliding_layers else None
    return AttentionShape(
        layers=layers,
        full_layers=layers - sliding_layers,
        sliding_layers=sliding_layers,
        sliding_window=window,
        kv_heads=int(kv_heads),
        head_dim=head_dim,
        elements_per_layer=elements,
    )


def _count_sliding_layers(cfg: dict[str, Any], layers: int) -> int:
    """Layers whose KV is bounded by a sliding window (see the module docstring)."""
    if not cfg.get("sliding_window"):
        return 0
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return sum(1 for kind in layer_types[:layers] if kind == "sliding_attention")
    pattern = cfg.get("sliding_window_pattern")
    if pattern is None and cfg.get("model_type") == "gemma2":
        pattern = 2  # Gemma 2 alternates local and global layers
    if isinstance(pattern, int) and pattern > 1:
        return layers - layers // pattern  # every pattern-th layer is global
    return 0


def kv_bytes_per_token(hf_config: dict[str, Any], kv_dtype: str) -> int:
    """KV-cache bytes one token costs across all layers:
    2 x layers x kv_heads x head_dim x dtype bytes (MLA: latent size instead of 2 x heads x dim).
    """
    shape = attention_shape(hf_config)
    return shape.layers * shape.elements_per_layer * dtype_bytes(kv_dtype)


def kv_bytes_per_sequence(hf_config: dict[str, Any], kv_dtype: str, context: int) -> int:
    """KV bytes one sequence of `context` tokens holds, with sliding layers capped at their
    window."""
    shape = attention_shape(hf_config)
    return _seq_bytes(shape, dtype_bytes(kv_dtype), context)


def _seq_bytes(shape: AttentionShape, width: int, context: int) -> int:
    per_layer_token = shape.elements_per_layer * width
    sliding_tokens = min(context, shape.sliding_window or 0)
    return per_layer_token * (shape.full_layers * context + shape.sliding_layers * sliding_tokens)


def _usable_context(shape: AttentionShape, width: int, budget: int) -> int | None:
    """Longest context whose sequence fits in `budget` bytes (inverse of `_seq_bytes`)."""
    per_layer_token = shape.elements_per_layer * width
    window = shape.sliding_window or 0
    all_layers = per_layer_token * shape.layers
    if budget <= all_layers * window:  # still inside the window: every layer pays
        return budget // all_layers
    if shape.full_layers == 0:
        return None
    spent_on_sliding = per_layer_token * shape.sliding_layers * window
    return (budget - spent_on_sliding) // (per_layer_token * shape.full_layers)


def max_num_seqs_for(seqs: int) -> int:
    """--max-num-seqs must be above the number of requests sent (the seed: 1,000 requests,
    1024): the next power of two above `seqs`."""
    value = 1
    while value <= seqs:
        value *= 2
    return value


def plan_memory(
    hf_config: dict[str, Any],
    *,
    kv_dtype: str,
    memory_gb: float,
    weights_gb: float,
    seqs: int,
    context: int,
) -> MemoryPlan:
    """Plan the KV cache for `seqs` concurrent sequences of up to `context` tokens, given
    `memory_gb` for vLLM (weights plus KV cache) of which `weights_gb` are weights."""
    if seqs < 1 or context < 1:
        raise UserError(f"seqs ({seqs}) and context ({context}) must be at least 1")
    if memory_gb <= 0 or weights_gb < 0:
        raise UserError(
            f"memory ({memory_gb} GB) must be positive and weights ({weights_gb} GB) not "
            "negative: pass --memory-gb and --weights-gb in decimal GB"
        )
    if weights_gb >= memory_gb:
        raise UserError(
            f"the weights ({weights_gb} GB) leave no room for a KV cache in {memory_gb} GB: "
            "give vLLM more memory (--memory-gb) or use smaller (quantised) weights"
        )
    shape = attention_shape(hf_config)
    width = dtype_bytes(kv_dtype)
    per_token = shape.layers * shape.elements_per_layer * width
    memory_bytes = int(memory_gb * GB)
    weights_bytes = int(weights_gb * GB)
    kv_bytes = memory_bytes - weights_bytes
    per_seq = _seq_bytes(shape, width, context)
    seqs_at_context = kv_bytes // per_seq
    usage = seqs * per_seq / kv_bytes
    flag_bytes = kv_bytes // MIB * MIB
    needs_expandable = flag_bytes > EXPANDABLE_SEGMENTS_ABOVE_BYTES

    warnings: list[str] = []
    if seqs_at_context < seqs:
        warnings.append(
            f"only {seqs_at_context} sequences of {context} tokens fit, not {seqs}: lower the "
            "concurrency or --max-model-len, "
            + ("" if width == 1 else "use an fp8 KV cache, ")
            + "or give vLLM more memory (shared prompts need less: plan memory "
            "--prompt-tokens-per-call --shared)"
        )
    if needs_expandable:
        warnings.append(
            f"a {flag_bytes / GIB:.1f} GiB KV cache is above ~54 GiB: start vLLM with "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or it may fail to allocate"
        )
    return MemoryPlan(
        kv_dtype=kv_dtype,
        kv_bytes_per_token=per_token,
        memory_bytes=memory_bytes,
        weights_bytes=weights_bytes,
        kv_cache_bytes=kv_bytes,
        tokens_that_fit=kv_bytes // per_token,
        seqs=seqs,
        context=context,
        bytes_per_seq_at_context=per_seq,
        usable_ctx_per_seq=_usable_context(shape, width, kv_bytes // seqs),
        seqs_at_context=seqs_at_context,
        kv_usage_at_plan=usage,
        kv_cache_memory_bytes=flag_bytes,
        max_num_seqs=max_num_seqs_for(seqs),
        needs_expandable_segments=needs_expandable,
        full_layers=shape.full_layers,
        sliding_layers=shape.sliding_layers,
        sliding_window=shape.sliding_window,
        warnings=tuple(warnings),
    )
