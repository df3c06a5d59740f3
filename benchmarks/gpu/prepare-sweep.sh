#!/bin/bash
# benchmarks/gpu/prepare-sweep.sh -- HERE, from the repository root: build .gpu/p1 and .gpu/p2 for
# all.sh. p1 is the vLLM archive's first piece; p2 its second piece, the kit's tiny tokenizer
# (model/), the committed sparkops package (kit/: git archive of COMMIT, default HEAD) and the
# rendered one-GPU stack (rendered/: `sparkops render` of benchmarks/gpu/inventory/one-gpu with
# the h200-llama8b-dummy-60g profile). Needs the archive from ../shared/gpu/pack-vllm.sh in
# $SPARKOPS_CACHE/gpu and the kit's venv (.venv).
set -euo pipefail

CACHE=${SPARKOPS_CACHE:-.cache}
COMMIT=${COMMIT:-HEAD}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >> .git/info/exclude
rm -rf .gpu/p1 .gpu/p2 && mkdir -p .gpu/p1 .gpu/p2/model .gpu/p2/kit
cp "$CACHE"/gpu/p1/* .gpu/p1/
cp "$CACHE"/gpu/p2/* .gpu/p2/
cp "$CACHE"/models/tiny/{tokenizer.json,tokenizer_config.json,chat_template.jinja,generation_config.json} .gpu/p2/model/
git archive "$COMMIT" src/sparkops | tar -x -C .gpu/p2/kit --strip-components=1
.venv/bin/sparkops render --inventory benchmarks/gpu/inventory/one-gpu \
  --profile benchmarks/gpu/h200-llama8b-dummy-60g.yaml --out .gpu/p2/rendered
du -sh .gpu/p1 .gpu/p2
