#!/bin/bash
# benchmarks/gpu/prepare-gemma4.sh -- HERE, from the repository root: stage what gemma4.sh needs
# under $DEST (default .gpu, git-ignored): p1 = the vLLM archive's first piece; p2 = its second
# piece, the kit's tiny tokenizer (model/), this folder's scripts (bench/, with COMMIT) and the
# rendered one-GPU stack (rendered/: `sparkops render` of benchmarks/gpu/inventory/one-gpu with
# h200-gemma4-12b-dummy-60g.yaml). Needs the archive from ../shared/gpu/pack-vllm.sh in
# $SPARKOPS_CACHE/gpu and the kit's venv (.venv). SRC: the checkout whose scripts travel [.].
set -euo pipefail
CACHE=${SPARKOPS_CACHE:-.cache}
DEST=${DEST:-.gpu}
SRC=${SRC:-.}
# ZPIECES=DIR: zstd pieces (NAME.tar.zst.NN + NAME.zpieces.sha256) instead, one per folder, the
# scripts with the last one (gemma4.sh reads either).
rm -rf "$DEST"/p[0-9]*
if [ -n "${ZPIECES:-}" ]; then
  i=0
  for f in "$ZPIECES"/*.tar.zst.[0-9][0-9]; do
    i=$((i + 1)); mkdir -p "$DEST/p$i"; cp "$f" "$ZPIECES"/*.zpieces.sha256 "$DEST/p$i/"
  done
  LAST=$DEST/p$i
else
  mkdir -p "$DEST/p1" "$DEST/p2"
  cp "$CACHE"/gpu/p1/* "$DEST/p1/"
  cp "$CACHE"/gpu/p2/* "$DEST/p2/"
  LAST=$DEST/p2
fi
mkdir -p "$LAST/model" "$LAST/bench"
cp "$CACHE"/models/tiny/{tokenizer.json,tokenizer_config.json,chat_template.jinja,generation_config.json} "$LAST/model/"
G=$SRC/benchmarks/gpu
cp -r "$G/gemma4.sh" "$G/seedload.py" "$G/compose_argv.py" "$G/kvhook" "$G/gemma4-12b" "$LAST/bench/"
git -C "$SRC" rev-parse --short HEAD > "$LAST/bench/COMMIT"
"$SRC/.venv/bin/sparkops" render --inventory "$G/inventory/one-gpu" \
  --profile "$G/h200-gemma4-12b-dummy-60g.yaml" --out "$LAST/rendered"
du -sh "$DEST"/p*
