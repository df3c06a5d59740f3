#!/bin/bash
# benchmarks/gpu/all.sh -- ON A GPU MACHINE, from the repository root: the whole GPU run.
#
# Unpacks the carried vLLM archive (pieces under $GPU_DIR/p*/ or already in $STAGE), serves a
# dummy-weight Llama-3.1-8B-shaped model (model_config.json, the kit's tiny tokenizer from
# $GPU_DIR/p*/model) with the GB10 profile's flags plus --api-server-count, then runs, each
# with 1,000 in flight on 4,000 fresh records:
#   kit_one_new / kit_one_old    the kit's one-step job (this checkout / $GPU_DIR/p*/kit_before)
#   bench                        vllm bench serve on the same prompt shape
#   kit_three_new / kit_three_old the kit's 3-step sample pipeline (src/sparkops/samples)
#   client_cost / _old          benchmarks/client_cost.py against the server (+ a profile) / old kit
#   kit_one_paced, kit_one_r8    one-step with the connection measures of batch/connections.py on
#                                (0.25 ms apart + recycled every 128 requests / every 8 requests)
# RUNS="kit_one_new bench ..." runs a subset. The old kit ($GPU_DIR/p*/kit_before) is any earlier
# checkout's src/sparkops, e.g. git archive COMMIT src/sparkops | tar -x -C .gpu/p2/kit_before
# --strip-components=1. Carry the archive pieces and the model folder as ../shared/gpu/README.md says
# (benchmarks/README.md, "GPU runs", has the calls).
# A 1 s sampler records running/waiting requests and CPU per process (sampler.py);
# analyze.py summarises each phase. Results: $W/out/ (summary.txt, run.log, results.tgz).
# Run it detached (it outlasts a 10-minute call): setsid bash benchmarks/gpu/all.sh &
set -u

W=${W:-/tmp/w} SITE=${SITE:-/tmp/site} STAGE=${STAGE:-/tmp/vpk} GPU_DIR=${GPU_DIR:-.gpu}
API_SERVERS=${API_SERVERS:-4} PORT=${PORT:-8000} NAME=vllm-0.26.0-h200 SERVED=${SERVED:-llama8b-dummy}
FLAGS=${FLAGS:---quantization fp8 --kv-cache-dtype fp8 --max-model-len 8192 --max-num-seqs 1024 --max-num-batched-tokens 32768 --enable-prefix-caching --prefix-caching-hash-algo xxhash --async-scheduling --enable-prompt-tokens-details --gpu-memory-utilization 0.85 --seed 1234}
mkdir -p "$W/out" "$SITE" "$STAGE"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s $(date -u +%T)] $*"; }
mark() { echo "$(date +%s.%N) $1 $2" >> "$W/phases.txt"; }
G=$W/benchmarks/gpu; mkdir -p "$W/kit" "$W/pipe"
cp -r benchmarks "$W/"; cp -r src/sparkops "$W/kit/"
for d in "$GPU_DIR"/p*/; do
  cp "$d"$NAME.* "$STAGE/" 2>/dev/null
  [ -d "$d/model" ] && cp -r "$d/model" "$W/"
  [ -d "$d/kit_before" ] && cp -r "$d/kit_before" "$W/"
done
log "commit ${COMMIT:-unknown}"

# ---- vLLM from the carried archive (SKIP_VLLM=1: a rehearsal against a server already on $PORT)
if [ -z "${SKIP_VLLM:-}" ] && [ ! -f "$SITE/.unpacked-$NAME" ]; then
  (cd "$STAGE" && sha256sum -c --quiet $NAME.pieces.sha256) || { log "archive pieces missing"; exit 1; }
  cat "$STAGE"/$NAME.tar.xz.[0-9][0-9] | xz -T0 -dc | tar -x -C "$SITE" || { log UNPACK_FAIL; exit 1; }
  touch "$SITE/.unpacked-$NAME"; rm -f "$STAGE"/$NAME.tar.xz.[0-9][0-9]
  log "unpacked"
fi
export PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$W/model"; rm -f "$W"/model/*.safetensors; cp "$G/model_config.json" "$W/model/config.json"
cp -r src/sparkops/samples/prompts src/sparkops/samples/stroke-triage.yaml "$G/one-step.yaml" "$W/pipe/"
sed -i "s/^model: .*/model: $SERVED/" "$W/pipe/stroke-triage.yaml" "$W/pipe/one-step.yaml"
python3 "$G/mkrec.py" src/sparkops/samples/triage_notes.jsonl "$W" A B C D E F
echo "$FLAGS --api-server-count $API_SERVERS" > "$W/flags.txt"
log "vllm $(python3 -c 'import vllm; print(vllm.__version__)' 2>/dev/null); flags: $(cat "$W/flags.txt")"
if [ -z "${SKIP_VLLM:-}" ] && ! curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null; then
  # shellcheck disable=SC2086
  setsid python3 -m vllm.entrypoints.cli.main serve "$W/model" --served-model-name llama8b-dummy \
    --load-format dummy $FLAGS --api-server-count "$API_SERVERS" --port "$PORT" > "$W/vllm.log" 2>&1 < /dev/null &
  echo $! > "$W/vllm.pid"
  until curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 "$(cat "$W/vllm.pid")" 2>/dev/null || { log "vLLM died"; tail -40 "$W/vllm.log"; exit 1; }
    [ "$(el)" -gt 600 ] && { log "vLLM not healthy after 600 s"; tail -40 "$W/vllm.log"; exit 1; }
    sleep 2
  done
fi
log "vLLM healthy"
grep -iE 'KV cache|Maximum concurrency|api server|backend' "$W/vllm.log" | cut -c1-200 | head -12
setsid python3 "$G/sampler.py" > "$W/sampler.log" 2>&1 < /dev/null & echo $! > "$W/sampler.pid"
sleep 2

EP=http://127.0.0.1:$PORT/v1
want() { [ -z "${RUNS:-}" ] || [[ " $RUNS " == *" $1 "* ]]; }  # RUNS="bench kit_one_new ...": a subset
report() {  # name: the kit's report and the figures of its report.json
  PYTHONPATH=$W/kit:$SITE python3 -m sparkops.cli report "$W/$1" > "$W/$1.report.out" 2>&1
  python3 - "$W/$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
keys = ("records", "done", "errors", "calls", "wall_s", "records_per_min", "prompt_tokens_per_s",
        "generation_tokens_per_s", "prefix_cache_hit_rate", "record_latency_p50_s",
        "records_per_min_steady")
out = {k: r.get(k) for k in keys}
if r.get("calls") and r.get("wall_s"):
    out["calls_per_s"] = round(r["calls"] / r["wall_s"], 1)
print("REPORT", sys.argv[1].rsplit("/", 1)[1], json.dumps(out))
PY
}
kit() {  # name kitdir pipeline tag
  want "$1" || return 0
  log "=== $1"; mark START "$1"
  PYTHONPATH=$2:$SITE timeout 300 python3 -m sparkops.cli batch run --pipeline "$W/pipe/$3" \
    --input "$W/recs_$4.jsonl" --out "$W/$1" --endpoint "$EP" --concurrency 1000 --no-progress > "$W/$1.log" 2>&1
  log "rc=$?"; mark END "$1"; tail -3 "$W/$1.log" | cut -c1-300; report "$1"; sleep 3
}
kit kit_one_new "$W/kit" one-step.yaml A
kit kit_one_old "$W/kit_before" one-step.yaml B

bench() {  # vllm bench serve on the one-step shape
  want bench || return 0
  log "=== bench"; mark START bench; mkdir -p "$W/bench"
  [ -n "${SKIP_VLLM:-}" ] && return 0
  timeout 300 python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat --endpoint /v1/chat/completions \
  --model llama8b-dummy --tokenizer "$W/model" --dataset-name random --random-prefix-len 3500 --random-input-len 110 \
  --random-output-len 8 --num-prompts 4000 --max-concurrency 1000 --ignore-eos --disable-tqdm --save-result \
  --result-dir "$W/bench" --result-filename bench.json --percentile-metrics ttft,tpot,e2el --ready-check-timeout-sec 60 \
  > "$W/bench.log" 2>&1
  log "rc=$?"; mark END bench; sleep 3
  grep -E 'Successful|Failed|Benchmark duration|Request throughput|Output token|Total input|Mean E2EL|Mean TTFT' "$W/bench.log"
}
bench

kit kit_three_new "$W/kit" stroke-triage.yaml C
kit kit_three_old "$W/kit_before" stroke-triage.yaml D

cost() {  # name kitdir [client_cost.py options]: client CPU per request, kit vs a bare aiohttp loop
  local name=$1 kitdir=$2; shift 2
  want "$name" || return 0
  log "=== $name ($kitdir $*)"; mark START "$name"
  PYTHONPATH=$kitdir:$SITE timeout 300 python3 "$W/benchmarks/client_cost.py" --no-local \
    --vllm "http://127.0.0.1:$PORT" --vllm-requests 5000 "$@" 2>&1 | grep -v warning
  mark END "$name"; sleep 2
}
cost client_cost "$W/kit" --profile "$W/profile.txt"
cost client_cost_old "$W/kit_before"

variant() {  # name tag kit_job.py options...: one-step with other connection settings
  local name=$1 tag=$2; shift 2
  want "$name" || return 0
  log "=== $name ($*)"; mark START "$name"
  PYTHONPATH=$W/kit:$SITE timeout 200 python3 "$G/kit_job.py" "$W/pipe/one-step.yaml" "$W/recs_$tag.jsonl" \
    "$W/$name" "$EP" "$@" > "$W/$name.log" 2>&1
  log "rc=$?"; mark END "$name"; tail -2 "$W/$name.log" | cut -c1-300; report "$name"; sleep 2
}
variant kit_one_paced E --recycle-every 128 --connect-gap 0.00025
variant kit_one_r8 F --recycle-every 8 --connect-gap 0.00025

kill "$(cat "$W/sampler.pid")" 2>/dev/null
python3 "$G/analyze.py" "$W"/kit_one_new "$W"/kit_one_old "$W"/kit_three_new "$W"/kit_three_old "$W"/kit_one_paced "$W"/kit_one_r8 > "$W/summary.txt" 2>&1
cat "$W/summary.txt" | cut -c1-2500
grep -E 'Running:' "$W/vllm.log" | tail -5 | sed 's/.*Engine 000: //' | cut -c1-200
cd "$W" && grep -v 'POST /v1/chat/completions HTTP' vllm.log > vllm_filtered.log
tar czf out/results.tgz summary.txt samples.txt phases.txt flags.txt profile.txt bench bench.log vllm_filtered.log \
  kit_*.log kit_*.report.out kit_*/report.json kit_*/report.md kit_*/timeline.jsonl kit_*/runs.jsonl 2>/dev/null
cp summary.txt profile.txt out/ 2>/dev/null
log "done"; touch "$W/DONE"
