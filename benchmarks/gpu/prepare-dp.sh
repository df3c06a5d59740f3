#!/bin/bash
# benchmarks/gpu/prepare-dp.sh -- HERE, from the repository root: build .gpu/p3 for dp-one-gpu.sh.
#
# Renders the one-GPU data-parallel inventory with the H200 profile (the kit's own files),
# archives the committed sparkops package, and packs litellm[proxy] for the device's Python 3.12
# (only what the vLLM archive and the device lack; LITELLM_SITE_XZ reuses a packed one).
# Needs the kit's venv (.venv) and a Python 3.12 with pip (PY312, or pyenv's 3.12).
set -euo pipefail

OUT=${OUT:-.gpu/p3}
LITELLM_VERSION=${LITELLM_VERSION:-$(sed -n 's/^LITELLM_VERSION=//p' src/sparkops/versions.env)}
CACHE=${SPARKOPS_CACHE:-.cache}
rm -rf "$OUT" && mkdir -p "$OUT/model" "$OUT/pipe" "$OUT/kit"
.venv/bin/sparkops render --inventory benchmarks/gpu/inventory/one-gpu-dp \
  --profile benchmarks/gpu/h200-llama8b-dummy.yaml --out "$OUT/rendered"
git archive HEAD src/sparkops | tar -x -C "$OUT/kit" --strip-components=1
cp "$CACHE"/models/tiny/{tokenizer.json,tokenizer_config.json,chat_template.jinja,generation_config.json} "$OUT/model/"
cp benchmarks/gpu/model_config.json benchmarks/gpu/mkrec.py benchmarks/gpu/compose_argv.py \
  benchmarks/gpu/dp-one-gpu.sh "$OUT/"
cp -r src/sparkops/samples/prompts src/sparkops/samples/stroke-triage.yaml "$OUT/pipe/"
cp src/sparkops/samples/triage_notes.jsonl "$OUT/"

# litellm[proxy] for cp312 manylinux x86-64, without what the vLLM archive already carries
# (fastapi and websockets are carried at litellm's versions: LiteLLM runs with its site first).
XZ=${LITELLM_SITE_XZ:-$CACHE/gpu/litellm-$LITELLM_VERSION-site.tar.xz}
if [ ! -f "$XZ" ]; then
  PY=${PY312:-$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
  work=$(mktemp -d)
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -r benchmarks/gpu/requirements-litellm-h200.txt "litellm==$LITELLM_VERSION" -d "$work/wheels"
  "$PY" -m pip install --quiet --no-deps --no-compile --target "$work/site" "$work"/wheels/*.whl
  tar -C "$work/site" --sort=name -cf - . | xz -6 -T0 > "$XZ"
  rm -rf "$work"
fi
cp "$XZ" "$OUT/litellm-site.tar.xz"
du -sh "$OUT"
