"""Generate a tiny Gemma 4: the hybrid-attention shape of Gemma 4 12B, small enough for vLLM-CPU.

The kit's planners read Gemma 4's per-layer shapes (sliding layers of several KV heads, full
layers of one wide KV head with K = V, a sliding window) and predict the KV-cache tokens vLLM
reports. The integration tests check that prediction against a served engine, so they need a
model with the same structure: twelve layers (every sixth full, as 12B's 5:1 pattern), sliding
layers 4 KV heads x 64 with a 128-token window, the full layers 1 KV head x 128
(`global_head_dim`, `num_global_key_value_heads`, `attention_k_eq_v` as 12B's text_config has
them), random weights, and the kit's tiny tokenizer (tiny_model.py) so the ids fit.

Like tiny_model.py this runs under the vLLM venv's python and imports nothing from sparkops:

    <vllm-venv>/bin/python tiny_gemma4.py OUT_DIR

Deterministic and atomic the same way: built in a temporary sibling folder, renamed into place,
the manifest written last.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import tiny_model  # type: ignore[import-not-found]  # a sibling: run as a script

# Bump when the output changes, so an older cached model is rebuilt instead of reused.
GENERATOR_VERSION = 1
MANIFEST = "sparkops-tiny-gemma4.json"
SEED = 20261203

HIDDEN_SIZE = 256
NUM_HEADS = 4
HEAD_DIM = 64  # sliding layers (12B: 256); vLLM's CPU attention rejects head_dim < 32
NUM_KV_HEADS = 4  # sliding layers (12B: 8); their page is twice the full layers' (12B: 4x)
GLOBAL_HEAD_DIM = 128  # full layers (12B: 512)
NUM_GLOBAL_KV_HEADS = 1  # full layers, as 12B
SLIDING_WINDOW = 128  # tokens (12B: 1,024)
NUM_LAYERS = 12  # every sixth full, as 12B's 48: ten sliding layers, two full
INTERMEDIATE_SIZE = 512


def text_config(vocab_size: int, tokenizer: Any) -> dict[str, Any]:
    """The checkpoint's own layout (global_* keys), as in 12B's text_config."""
    layer_types = [
        "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(NUM_LAYERS)
    ]
    return {
        "model_type": "gemma4_text",
        "architectures": ["Gemma4ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_k_eq_v": True,
        "dtype": "bfloat16",
        "enable_moe_block": False,
        "final_logit_softcapping": 30.0,
        "global_head_dim": GLOBAL_HEAD_DIM,
        "head_dim": HEAD_DIM,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": HIDDEN_SIZE,
        "hidden_size_per_layer_input": 0,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE_SIZE,
        "layer_types": layer_types,
        "max_position_embeddings": tiny_model.MAX_POSITIONS,
        "num_attention_heads": NUM_HEADS,
        "num_global_key_value_heads": NUM_GLOBAL_KV_HEADS,
        "num_hidden_layers": NUM_LAYERS,
        "num_key_value_heads": NUM_KV_HEADS,
        "num_kv_shared_layers": 0,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "full_attention": {
                "partial_rotary_factor": 0.25,
                "rope_theta": 1000000.0,
                "rope_type": "proportional",
            },
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "sliding_window": SLIDING_WINDOW,
        "tie_word_embeddings": True,
        "use_cache": True,
        "use_double_wide_mlp": False,
        "vocab_size": vocab_size,
        "vocab_size_per_layer_input": vocab_size,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def build_model(tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """A randomly initialised Gemma4ForCausalLM (fixed seed) and the config.json to ship."""
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig, GenerationConfig

    torch.manual_seed(SEED)
    raw = text_config(len(tokenizer), tokenizer)
    config = Gemma4TextConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    model = Gemma4ForCausalLM(config).to(torch.bfloat16)
    end_turn = tokenizer.convert_tokens_to_ids(tiny_model.TURN_END)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, end_turn],
        pad_token_id=tokenizer.pad_token_id,
    )
    return model, raw


def is_complete(out_dir: Path) -> bool:
    """True when out_dir holds this generator version's finished output."""
    return bool(tiny_model.is_complete(out_dir, MANIFEST, GENERATOR_VERSION))


def _write(tmp: Path) -> dict[str, Any]:
    tokenizer = tiny_model.train_tokenizer(tiny_model.synthetic_corpus())
    model, raw = build_model(tokenizer)
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    # transformers writes its per-layer layout; ship the checkpoint's own (global_* keys),
    # as 12B's config.json has it: the layout vLLM and the planner must both read.
    (tmp / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    return {
        "seed": SEED,
        "architecture": "Gemma4ForCausalLM",
        "num_hidden_layers": NUM_LAYERS,
        "sliding_window": SLIDING_WINDOW,
        "vocab_size": len(tokenizer),
    }


def generate(out_dir: Path) -> Path:
    """Write the model into out_dir unless a complete one is already there."""
    return Path(tiny_model.publish(out_dir, MANIFEST, GENERATOR_VERSION, _write))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the sparkops tiny Gemma 4.")
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    print(generate(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
