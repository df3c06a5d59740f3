#!/bin/bash
# benchmarks/gpu/all.sh -- ON A GPU MACHINE, from the repository root: the whole GPU run.
#
# vLLM starts from the kit's own rendered files: $GPU_DIR/p*/rendered holds `sparkops render` of
# benchmarks/gpu/inventory/one-gpu with the h200-llama8b-dummy-60g profile (Llama-3.1-8B-shaped
# dummy weights, FP8 weights and the seed's 60 GiB FP8 KV cache, 4 API servers), and
# compose_argv.py turns its vllm service into a command line (no Docker on the GPU machine),
# plus VLLM_SERVER_DEV_MODE=1 so `bench sweep --cold` can empty the prefix cache between levels.
# The kit is $GPU_DIR/p*/kit (git archive of a commit's src/sparkops). Then, in order:
#   sweep        bench sweep --cold at $LEVELS on $RECORDS fresh records per level (3-step sample
#                pipeline), with the decode ceiling (--profile, --machine h200): table, the
#                bottleneck per level, the planner's predicted vs measured per level, plots
#   plan         plan throughput calibrated on the top level, for every other level
#   kit_one      the one-step job at 1,000 in flight on 4,000 fresh records, its report, and the
#                planner asked to carry the sweep's rate over to it (it refuses across bottlenecks)
#   bench        vllm bench serve on the one-step shape (3,500 shared + 110 random tokens, 8 out)
#   client_cost  benchmarks/client_cost.py: client CPU per request, kit vs a bare aiohttp loop
# RUNS="sweep plan ..." runs a subset. Carry the archive pieces and the model folder as
# ../shared/gpu/README.md says (benchmarks/README.md, "GPU runs", has the calls). A 1 s sampler
# (sampler.py) records the server side. Results: $W/out/ (summary.txt, run.log, results.tgz).
# Run it detached (it outlasts a 10-minute call): setsid bash benchmarks/gpu/all.sh &
set -u

W=${W:-/tmp/w} SITE=${SITE:-/tmp/site} STAGE=${STAGE:-/tmp/vpk} GPU_DIR=${GPU_DIR:-.gpu}
PORT=8000 NAME=vllm-0.26.0-h200 SERVED=llama8b-dummy
LEVELS=${LEVELS:-240,480,960} RECORDS=${RECORDS:-10000}
mkdir -p "$W/out" "$SITE" "$STAGE" "$W/pipe"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s $(date -u +%T)] $*"; }
G=benchmarks/gpu
for d in "$GPU_DIR"/p*/; do
  cp "$d"$NAME.* "$STAGE/" 2>/dev/null
  for part in model kit rendered; do [ -d "$d/$part" ] && cp -r "$d/$part" "$W/"; done
done
log "commit ${COMMIT:-unknown}"

if [ ! -f "$SITE/.unpacked-$NAME" ]; then
  (cd "$STAGE" && sha256sum -c --quiet $NAME.pieces.sha256) || { log "archive pieces missing"; exit 1; }
  cat "$STAGE"/$NAME.tar.xz.[0-9][0-9] | xz -T0 -dc | tar -x -C "$SITE" || { log UNPACK_FAIL; exit 1; }
  touch "$SITE/.unpacked-$NAME"; rm -f "$STAGE"/$NAME.tar.xz.[0-9][0-9]
  log "unpacked"
fi
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 W PORT
KIT="env PYTHONPATH=$W/kit:$SITE python3 -m sparkops.cli"
rm -f "$W"/model/*.safetensors; cp "$G/model_config.json" "$W/model/config.json"
cp -r src/sparkops/samples/prompts src/sparkops/samples/stroke-triage.yaml "$G/one-step.yaml" "$W/pipe/"
sed -i "s/^model: .*/model: $SERVED/" "$W/pipe/stroke-triage.yaml" "$W/pipe/one-step.yaml"
N=$RECORDS python3 "$G/mkrec.py" src/sparkops/samples/triage_notes.jsonl "$W" S
N=4000 python3 "$G/mkrec.py" src/sparkops/samples/triage_notes.jsonl "$W" A
log "vllm $(PYTHONPATH=$SITE python3 -c 'import vllm; print(vllm.__version__)' 2>/dev/null)"

# ---- vLLM: the rendered compose service's command and environment, as Docker would run it
line=$(PYTHONPATH=$SITE python3 "$G/compose_argv.py" "$W/rendered/spark-1/compose.yml" vllm \
  python3 -m vllm.entrypoints.cli.main serve)
line="VLLM_SERVER_DEV_MODE=1 ${line//_OFFLINE=0/_OFFLINE=1}"
echo "$line" > "$W/vllm.cmd"; log "vllm command: $line"
PYTHONPATH=$SITE setsid bash -c "exec env $line" > "$W/vllm.log" 2>&1 < /dev/null &
echo $! > "$W/vllm.pid"
until curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null; do
  kill -0 "$(cat "$W/vllm.pid")" 2>/dev/null || { log "vLLM died"; tail -40 "$W/vllm.log"; exit 1; }
  [ "$(el)" -gt 600 ] && { log "vLLM not healthy after 600 s"; tail -40 "$W/vllm.log"; exit 1; }
  sleep 2
done
log "vLLM healthy"
grep -iE 'KV cache|Maximum concurrency|api server|backend' "$W/vllm.log" | cut -c1-200 | head -12
PYTHONPATH=$SITE setsid python3 "$G/sampler.py" > "$W/sampler.log" 2>&1 < /dev/null &
echo $! > "$W/sampler.pid"

EP=http://127.0.0.1:$PORT
want() { [ -z "${RUNS:-}" ] || [[ " $RUNS " == *" $1 "* ]]; }

if want sweep; then
  log "=== sweep $LEVELS, $RECORDS records per level"
  timeout 560 $KIT bench sweep --pipeline "$W/pipe/stroke-triage.yaml" --input "$W/recs_S.jsonl" \
    --levels "$LEVELS" --out "$W/sweep" --endpoint "$EP" --cold --no-progress --limit "$RECORDS" \
    --profile "$G/h200-llama8b-dummy-60g.yaml" --machine h200 > "$W/sweep.log" 2>&1
  rc=$?; log "rc=$rc"; tail -60 "$W/sweep.log" | cut -c1-240
  if [ "$rc" != 0 ] && ! ls -d "$W"/sweep/level-* >/dev/null 2>&1; then  # --cold refused: warm
    log "=== sweep again without --cold"
    timeout 560 $KIT bench sweep --pipeline "$W/pipe/stroke-triage.yaml" --input "$W/recs_S.jsonl" \
      --levels "$LEVELS" --out "$W/sweep" --endpoint "$EP" --no-progress --limit "$RECORDS" \
      --profile "$G/h200-llama8b-dummy-60g.yaml" --machine h200 > "$W/sweep.log" 2>&1
    log "rc=$?"; tail -60 "$W/sweep.log" | cut -c1-240
  fi
fi
if want plan; then
  top=${LEVELS##*,}
  for level in ${LEVELS//,/ }; do
    log "=== plan throughput --from-sweep (level $top) --for-level $level"
    $KIT plan throughput --from-sweep "$W/sweep" --level "$top" --for-level "$level" --points 0 2>&1 \
      | tail -3 | tee -a "$W/plan.txt"
  done
fi
if want kit_one; then
  log "=== kit_one"
  timeout 300 $KIT batch run --pipeline "$W/pipe/one-step.yaml" --input "$W/recs_A.jsonl" \
    --out "$W/kit_one" --endpoint "$EP/v1" --concurrency 1000 --no-progress > "$W/kit_one.log" 2>&1
  log "rc=$?"; tail -3 "$W/kit_one.log" | cut -c1-300
  $KIT report "$W/kit_one" > "$W/kit_one.report.out" 2>&1
  grep -E 'Records/min|tok/s|Bottleneck|hit rate' "$W/kit_one.report.out" | cut -c1-240
  log "=== plan throughput --from-sweep --for-report kit_one"
  $KIT plan throughput --from-sweep "$W/sweep" --for-report "$W/kit_one" --points 0 2>&1 \
    | tail -3 | tee -a "$W/plan.txt"
fi
if want bench; then
  log "=== bench"; mkdir -p "$W/bench"
  PYTHONPATH=$SITE timeout 300 python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat \
    --endpoint /v1/chat/completions --model $SERVED --tokenizer "$W/model" --dataset-name random \
    --random-prefix-len 3500 --random-input-len 110 --random-output-len 8 --num-prompts 4000 \
    --max-concurrency 1000 --ignore-eos --disable-tqdm --save-result --result-dir "$W/bench" \
    --result-filename bench.json --percentile-metrics ttft,tpot,e2el --ready-check-timeout-sec 60 \
    > "$W/bench.log" 2>&1
  log "rc=$?"
  grep -E 'Successful|Failed|Benchmark duration|Request throughput|Output token|Total input|Mean E2EL|Mean TTFT' "$W/bench.log"
fi
if want client_cost; then
  log "=== client_cost"
  # CC_REQUESTS: job sizes, each its own alternating rounds; two sizes split the kit's per-job
  # cost (pre-flight, samples, job folder) from its per-request cost. CC_PROFILE=1: the last
  # size is also profiled.
  for n in ${CC_REQUESTS:-4000}; do
    PYTHONPATH=$W/kit:$SITE timeout 400 python3 benchmarks/client_cost.py --no-local --vllm "$EP" \
      --vllm-requests "$n" --rounds "${CC_ROUNDS:-5}" \
      ${CC_PROFILE:+--profile "$W/out/client_profile.txt"} 2>&1 \
      | grep -v warning | tee -a "$W/client_cost.txt"
  done
fi

kill "$(cat "$W/sampler.pid")" 2>/dev/null
grep -E 'Running:' "$W/vllm.log" | tail -5 | sed 's/.*Engine 000: //' | cut -c1-200
cd "$W" && grep -v 'POST /v1/chat/completions HTTP' vllm.log > vllm_filtered.log
tar czf out/results.tgz sweep/sweep.json sweep/sweep.md sweep/*.png sweep/level-*/report.* \
  sweep/level-*/timeline.jsonl sweep/level-*/runs.jsonl kit_one/report.json kit_one/report.md \
  kit_one/timeline.jsonl plan.txt bench/bench.json bench.log client_cost.txt samples.txt vllm.cmd \
  vllm_filtered.log ./*.log 2>/dev/null
cp sweep/sweep.md sweep/decode_ceiling.png plan.txt client_cost.txt out/ 2>/dev/null
log "done"; touch "$W/DONE"
