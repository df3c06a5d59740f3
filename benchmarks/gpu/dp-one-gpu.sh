#!/bin/bash
# benchmarks/gpu/dp-one-gpu.sh -- ON A GPU MACHINE: data parallel behind LiteLLM, from the kit's
# rendered files, with two vLLM replicas sharing one GPU (the two-GPU machine was not lent).
#
# $P3 (default /tmp/p3) holds what benchmarks/gpu/prepare-dp.sh put in .gpu/p3 here:
#   rendered/       `sparkops render` of benchmarks/gpu/inventory/one-gpu-dp with the
#                   h200-llama8b-dummy profile: each replica's compose.yml, the router's
#                   litellm-config.yaml and router.env (the master key)
#   kit/            the committed sparkops package (git archive)
#   litellm-site.tar.xz  litellm[proxy] and what it needs beyond the vLLM archive (Python 3.12)
#   model/ model_config.json pipe/ triage_notes.jsonl  the tiny tokenizer, the 8B-shaped config,
#                   the 3-step sample pipeline and its notes
# The vLLM archive pieces must already be in $STAGE (../shared/gpu/README.md, calls 1 and 2).
# Each replica runs its rendered vLLM command (compose_argv.py: the compose service's command,
# environment and published address, without Docker); the router runs its rendered command.
# Jobs (3-step sample pipeline, 4,000 fresh records each, 1,000 in flight):
#   router        through LiteLLM          direct       through the client's two endpoints
#   router_kill   LiteLLM, replica-b killed (SIGKILL, whole process group) 20 s in
#   direct_kill   two endpoints, replica-b killed 20 s in (after replica-b is restarted)
# Each job: exit status, records once each, records/min, hit rate, and per-replica metric deltas.
# Run it detached (it outlasts a 10-minute call): setsid bash dp-one-gpu.sh > /tmp/w/run.log 2>&1 &
set -u

W=${W:-/tmp/w} SITE=${SITE:-/tmp/site} LSITE=${LSITE:-/tmp/lsite} STAGE=${STAGE:-/tmp/vpk}
P3=${P3:-/tmp/p3} NAME=vllm-0.26.0-h200 KILL_AFTER=${KILL_AFTER:-20}
# JOBS: a subset, in this order. ROUTER_WORKERS: LiteLLM's --num_workers appended to the
# rendered router command for every router job (an experiment: one worker held the router at
# 100% of a core; the pinned LiteLLM's workers died at start).
JOBS=${JOBS:-router direct router_kill direct_kill} ROUTER_WORKERS=${ROUTER_WORKERS:-}
R=$P3/rendered
mkdir -p "$W/out" "$SITE" "$LSITE"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(el)s $(date -u +%T)] $*"; }

if [ ! -f "$SITE/.unpacked-$NAME" ]; then
  (cd "$STAGE" && sha256sum -c --quiet $NAME.pieces.sha256) || { log "vLLM archive pieces missing"; exit 1; }
  cat "$STAGE"/$NAME.tar.xz.[0-9][0-9] | xz -T0 -dc | tar -x -C "$SITE" || { log "vLLM unpack failed"; exit 1; }
  touch "$SITE/.unpacked-$NAME"; rm -f "$STAGE"/$NAME.tar.xz.[0-9][0-9]
fi
if [ ! -f "$LSITE/.unpacked" ]; then
  xz -T0 -dc "$P3/litellm-site.tar.xz" | tar -x -C "$LSITE" || { log "litellm unpack failed"; exit 1; }
  touch "$LSITE/.unpacked"
fi
log "unpacked"
mkdir -p "$W/model" "$W/pipe"
cp "$P3"/model/* "$W/model/"; cp "$P3/model_config.json" "$W/model/config.json"
cp -r "$P3"/pipe/* "$W/pipe/"
sed -i "s/^model: .*/model: llama8b-dummy/" "$W/pipe/stroke-triage.yaml"
python3 "$P3/mkrec.py" "$P3/triage_notes.jsonl" "$W" R D RK DK
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 TRANSFORMERS_OFFLINE=1 CUDA_VISIBLE_DEVICES=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log "vllm $(PYTHONPATH=$SITE python3 -c 'import vllm; print(vllm.__version__)' 2>/dev/null)"

wait_url() {  # url pidfile seconds
  local start; start=$(el)
  until curl -sf -m 2 "$1" >/dev/null; do
    kill -0 "$(cat "$2")" 2>/dev/null || { log "died: $2"; return 1; }
    [ $(( $(el) - start )) -gt "$3" ] && { log "not healthy after $3 s: $1"; return 1; }
    sleep 2
  done
}
start_replica() {  # replica: its rendered vLLM command (the model folder is local: *_OFFLINE=1)
  local line
  line=$(PYTHONPATH=$SITE python3 "$P3/compose_argv.py" "$R/$1/compose.yml" vllm \
    python3 -m vllm.entrypoints.cli.main serve)
  line=${line//_OFFLINE=0/_OFFLINE=1}
  echo "$line" > "$W/$1.cmd"
  PYTHONPATH=$SITE setsid bash -c "exec $line" > "$W/$1.log" 2>&1 < /dev/null &
  echo $! > "$W/$1.pid"
}
start_replica replica-a
wait_url http://127.0.0.1:8000/health "$W/replica-a.pid" 600 || { tail -30 "$W/replica-a.log"; exit 1; }
log "replica-a healthy"
start_replica replica-b
wait_url http://127.0.0.2:8000/health "$W/replica-b.pid" 600 || { tail -30 "$W/replica-b.log"; exit 1; }
log "replica-b healthy"
grep -hiE 'KV cache|Maximum concurrency' "$W"/replica-?.log | cut -c1-200 | head -6
nvidia-smi --query-gpu=memory.used,memory.total --format=csv

line=$(PYTHONPATH=$SITE python3 "$P3/compose_argv.py" "$R/replica-a/compose.yml" router \
  python3 -m litellm.proxy.proxy_cli)${ROUTER_WORKERS:+ --num_workers $ROUTER_WORKERS}
echo "$line" | sed 's/LITELLM_MASTER_KEY=[^ ]*/LITELLM_MASTER_KEY=.../' > "$W/router.cmd"
PYTHONPATH=$LSITE:$SITE setsid bash -c "exec $line" > "$W/router.log" 2>&1 < /dev/null &
echo $! > "$W/router.pid"
wait_url http://127.0.0.1:4000/health/liveliness "$W/router.pid" 180 || { tail -30 "$W/router.log"; exit 1; }
log "router healthy"
set -a; . "$R/replica-a/router.env"; set +a   # LITELLM_MASTER_KEY, for --api-key-env

snap() {  # tag: both replicas' /metrics
  curl -s -m 5 http://127.0.0.1:8000/metrics > "$W/metrics/$1.a.txt"
  curl -s -m 5 http://127.0.0.2:8000/metrics > "$W/metrics/$1.b.txt"
}
mkdir -p "$W/metrics"
job() {  # name records-tag [--kill] endpoint-options...
  local name=$1 tag=$2 kill=""; shift 2
  [[ " $JOBS " == *" $name "* ]] || return 0
  [ "${1:-}" = --kill ] && { kill=1; shift; }
  log "=== $name ($*)"; snap "$name.before"
  PYTHONPATH=$P3/kit:$SITE timeout "${JOB_TIMEOUT:-400}" python3 -m sparkops.cli batch run \
    --pipeline "$W/pipe/stroke-triage.yaml" --input "$W/recs_$tag.jsonl" --out "$W/$name" \
    --concurrency 1000 --no-progress "$@" > "$W/$name.log" 2>&1 &
  local pid=$!
  if [ -n "$kill" ]; then
    sleep "$KILL_AFTER"; log "killing replica-b (pgid $(cat "$W/replica-b.pid"))"
    kill -KILL -- "-$(cat "$W/replica-b.pid")"
  fi
  wait $pid; local rc=$?
  snap "$name.after"
  log "$name rc=$rc"; tail -3 "$W/$name.log" | cut -c1-300
  PYTHONPATH=$P3/kit:$SITE python3 -m sparkops.cli report "$W/$name" > "$W/$name.report.out" 2>&1
  PYTHONPATH=$SITE python3 - "$W" "$name" "$rc" <<'PY'
import json, sys
from pathlib import Path
from prometheus_client.parser import text_string_to_metric_families
w, name, rc = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rows = [json.loads(line) for line in (w / name / "results.jsonl").read_text().splitlines() if line]
ids = [row.get("id") for row in rows]
report = json.loads((w / name / "report.json").read_text())
keys = ("records", "done", "errors", "calls", "wall_s", "records_per_min", "records_per_min_steady",
        "prefix_cache_hit_rate", "record_latency_p50_s")
out = {"rc": rc, "lines": len(rows), "unique_ids": len(set(ids))}
out.update({k: report.get(k) for k in keys})
def counters(path):
    values = {}
    if not path.exists() or not path.stat().st_size:
        return values
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            if sample.name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                               "vllm:request_success_total", "vllm:prompt_tokens_total"):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values
for replica in "ab":
    before = counters(w / "metrics" / f"{name}.before.{replica}.txt")
    after = counters(w / "metrics" / f"{name}.after.{replica}.txt")
    delta = {k.split(":")[1]: after.get(k, 0) - before.get(k, 0) for k in after}
    if delta.get("prefix_cache_queries_total"):
        delta["hit_rate"] = round(delta["prefix_cache_hits_total"] / delta["prefix_cache_queries_total"], 4)
    out[f"replica_{replica}"] = delta if after else "down at the end"
print("RESULT", name, json.dumps(out))
PY
  sleep 3
}
ROUTER=(--endpoint http://127.0.0.1:4000/v1 --api-key-env LITELLM_MASTER_KEY)
DIRECT=(--endpoint http://127.0.0.1:8000/v1 --endpoint http://127.0.0.2:8000/v1)
job router R "${ROUTER[@]}"
job direct D "${DIRECT[@]}"
job router_kill RK --kill "${ROUTER[@]}"
start_replica replica-b
wait_url http://127.0.0.2:8000/health "$W/replica-b.pid" 600 || { tail -30 "$W/replica-b.log"; exit 1; }
log "replica-b healthy again"
job direct_kill DK --kill "${DIRECT[@]}"

grep -E 'RESULT' "$W/run.log" > "$W/out/results.txt" 2>/dev/null
cd "$W" && tar czf out/results.tgz ./*.log ./*.cmd ./*.report.out ./*/report.json ./*/report.md \
  ./*/runs.jsonl metrics 2>/dev/null
log "done"; touch "$W/DONE"
