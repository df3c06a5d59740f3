#!/bin/bash
# benchmarks/gpu/gemma4.sh -- ON A GPU MACHINE, from the repository root: Gemma 4 12B's
# architecture served from the kit's rendered command, then the seed's table (issue 30).
#
# $GPU_DIR/p*/ carry the vLLM archive pieces (../shared/gpu/pack-vllm.sh), the kit's tiny
# tokenizer (model/), this folder's scripts (bench/) and `sparkops render` of
# benchmarks/gpu/inventory/one-gpu with h200-gemma4-12b-dummy-60g.yaml (rendered/); see
# prepare-gemma4.sh. vLLM starts from the rendered compose service (compose_argv.py), with
# VLLM_SERVER_DEV_MODE=1 (each level empties the prefix cache) and kvhook/ first on PYTHONPATH
# (it records the KV-cache groups vLLM builds; nothing else changes). Then seedload.py runs the
# seed-shaped records at $LEVELS in flight and, unless RUNS leaves it out, the structured-output
# comparison (2 tokens out, with and without `structured_outputs: {choice: ...}`) at 240 and
# 960. Results: $W/out/ (summary.txt, startup.txt, results.tgz). Run detached:
#   setsid bash .gpu/p2/bench/gemma4.sh > /tmp/w/run.log 2>&1 < /dev/null &
set -u
W=${W:-/tmp/w} SITE=${SITE:-/tmp/site} STAGE=${STAGE:-/tmp/vpk} GPU_DIR=${GPU_DIR:-.gpu}
PORT=8000 NAME=vllm-0.26.0-h200 SERVED=gemma4-12b-fp8dyn
LEVELS=${LEVELS:-1,240,480,960} SECONDS_PER_LEVEL=${SECONDS_PER_LEVEL:-80} WARM=${WARM:-20}
RUNS=${RUNS:-"seed choice"}
mkdir -p "$W/out" "$SITE" "$STAGE"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s $(date -u +%T)] $*"; }
for d in "$GPU_DIR"/p*/; do
  cp "$d"$NAME.* "$STAGE/" 2>/dev/null
  for part in model bench rendered; do [ -d "$d/$part" ] && cp -r "$d/$part" "$W/"; done
done
B=$W/bench
log "commit ${COMMIT:-$(cat "$B/COMMIT" 2>/dev/null)}"
# The archive: pack-vllm.sh's xz pieces, or the same tree as zstd pieces (NAME.tar.zst.NN with
# NAME.zpieces.sha256; zstd -9 packs in ~3 min where xz -9 took over 20 on a loaded 2-core
# machine). Without a zstd command there, pyarrow's zstd stream reads them.
unzstd() { if command -v zstd >/dev/null; then zstd -dc; else python3 -c 'import shutil, sys, pyarrow as pa
shutil.copyfileobj(pa.CompressedInputStream(pa.PythonFile(sys.stdin.buffer, mode="r"), "zstd"), sys.stdout.buffer, 1 << 22)'; fi; }
if [ ! -f "$SITE/.unpacked-$NAME" ]; then
  if [ -f "$STAGE/$NAME.zpieces.sha256" ]; then
    (cd "$STAGE" && sha256sum -c --quiet $NAME.zpieces.sha256) || { log "archive pieces missing"; exit 1; }
    cat "$STAGE"/$NAME.tar.zst.[0-9][0-9] | unzstd | tar -x -C "$SITE" || { log UNPACK_FAIL; exit 1; }
    rm -f "$STAGE"/$NAME.tar.zst.[0-9][0-9]
  else
    (cd "$STAGE" && sha256sum -c --quiet $NAME.pieces.sha256) || { log "archive pieces missing"; exit 1; }
    cat "$STAGE"/$NAME.tar.xz.[0-9][0-9] | xz -T0 -dc | tar -x -C "$SITE" || { log UNPACK_FAIL; exit 1; }
    rm -f "$STAGE"/$NAME.tar.xz.[0-9][0-9]
  fi
  touch "$SITE/.unpacked-$NAME"
  log "unpacked"
fi
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 KVHOOK_LOG=$W/kvhook.jsonl
rm -f "$W"/model/*.safetensors; cp "$B/gemma4-12b/config.json" "$W/model/config.json"
log "vllm $(PYTHONPATH=$SITE python3 -c 'import vllm, transformers, torch; print(vllm.__version__, "transformers", transformers.__version__, "torch", torch.__version__)' 2>/dev/null)"

line=$(PYTHONPATH=$SITE python3 "$B/compose_argv.py" "$W/rendered/spark-1/compose.yml" vllm \
  python3 -m vllm.entrypoints.cli.main serve)
line="VLLM_SERVER_DEV_MODE=1 ${line//_OFFLINE=0/_OFFLINE=1}"
echo "$line" > "$W/vllm.cmd"; log "vllm command: $line"
PYTHONPATH=$B/kvhook:$SITE setsid bash -c "exec env $line" > "$W/vllm.log" 2>&1 < /dev/null &
echo $! > "$W/vllm.pid"
until curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null; do
  kill -0 "$(cat "$W/vllm.pid")" 2>/dev/null || { log "vLLM died"; tail -60 "$W/vllm.log" | cut -c1-400; cp "$W/vllm.log" "$W/out/"; touch "$W/DONE"; exit 1; }
  [ "$(el)" -gt 560 ] && { log "vLLM not healthy after 560 s"; tail -40 "$W/vllm.log"; cp "$W/vllm.log" "$W/out/"; touch "$W/DONE"; exit 1; }
  sleep 2
done
log "vLLM healthy"
{
  echo "# healthy $(el) s after the script started"; cat "$W/vllm.cmd"
  grep -iE 'KV cache|Maximum concurrency|backend|block size|block_size|hybrid|sliding|page size|padding|Auto-fit|head|per-layer|Loading weights took|Model loading took|torch.compile|graph capturing|init engine|available KV' "$W/vllm.log" | cut -c1-400 | head -60
  echo "# kvhook"; cat "$W/kvhook.jsonl" 2>/dev/null
  echo "# cache_config_info"; curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^vllm:cache_config_info' | head -3
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
} > "$W/out/startup.txt" 2>&1
cat "$W/out/startup.txt"
curl -s -m 60 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$SERVED\",\"prompt\":[5,6,7,8],\"max_tokens\":4,\"ignore_eos\":true}" | cut -c1-400; echo

run_load() {  # tag levels extra-args...
  local tag=$1 levels=$2; shift 2
  log "=== $tag at $levels"
  PYTHONPATH=$SITE timeout 560 python3 "$B/seedload.py" --endpoint "http://127.0.0.1:$PORT" \
    --model $SERVED --levels "$levels" --out "$W/load" --tag "$tag" "$@" 2>&1 | tee -a "$W/out/summary.txt"
}
[[ " $RUNS " == *" seed "* ]] && run_load seed "$LEVELS" --seconds "$SECONDS_PER_LEVEL" --warm "$WARM"
log "seed done"
if [[ " $RUNS " == *" choice "* ]]; then
  run_load tiny 240,960 --seconds 40 --warm 10 --max-tokens 2
  run_load choice 240,960 --seconds 40 --warm 10 --max-tokens 2 --choice
fi
grep -E 'Running:' "$W/vllm.log" | tail -3 | cut -c1-300
cd "$W" && grep -v 'POST /v1/completions HTTP' vllm.log > vllm_filtered.log
tar czf out/results.tgz load vllm.cmd vllm_filtered.log kvhook.jsonl 2>/dev/null
log "done"; touch "$W/DONE"
