"""1 s sampler for GPU runs: the server's running/waiting requests and counters from /metrics,
GPU utilisation, CPU per process (each API server apart) and client TCP connections to :8000.

One line per second to $W/samples.txt (default /tmp/w); analyze.py reads it. Runs until killed.
"""

import contextlib
import os
import subprocess
import time
import urllib.request
from pathlib import Path

W = Path(os.environ.get("W", "/tmp/w"))
PORT = int(os.environ.get("PORT", "8000"))
WANT = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:request_success_total": "done",
    "vllm:prompt_tokens_total": "ptok",
    "vllm:generation_tokens_total": "gtok",
    "vllm:prefix_cache_hits_total": "phit",
    "vllm:e2e_request_latency_seconds_sum": "e2e_sum",
    "vllm:e2e_request_latency_seconds_count": "e2e_n",
    "vllm:request_queue_time_seconds_sum": "q_sum",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_n",
}
HZ = os.sysconf("SC_CLK_TCK")


def label(pid: str) -> str | None:
    """What a process is: kit, bench, an API server, the engine core, ..."""
    try:
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if "sparkops" in cmd:
        return "kit"
    if " bench " in cmd:
        return "bench"
    if "sampler.py" in cmd:
        return "sampler"
    if comm.startswith("VLLM"):
        return comm.replace("::", "_")
    if "api_server" in cmd or " serve " in cmd:
        return "api"
    if comm.startswith(("python", "pt_")):
        return comm
    return None


def conns() -> int:
    """Established TCP connections to the server's port (both directions counted once)."""
    port = f":{PORT:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return 0
    return sum(1 for line in lines if line.split()[2].endswith(port) and line.split()[3] == "01")


def metrics() -> tuple[dict[str, float], float]:
    t = time.time()
    vals: dict[str, float] = {}
    try:
        url = f"http://127.0.0.1:{PORT}/metrics"
        txt = urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception:
        return vals, -1.0
    for line in txt.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in WANT:
            with contextlib.suppress(ValueError):
                vals[WANT[name]] = vals.get(WANT[name], 0.0) + float(line.rsplit(" ", 1)[1])
    return vals, time.time() - t


def gpu_util() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=3,
        ).stdout.strip()
    except Exception:
        return "?"


def cpu_ticks() -> dict[str, int]:
    cur = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cur[pid] = int(f[11]) + int(f[12])
        except (OSError, IndexError, ValueError):
            continue
    return cur


def main() -> None:
    labels: dict[str, str | None] = {}
    prev: dict[str, int] = {}
    prev_t = 0.0
    while True:
        t = time.time()
        vals, mlat = metrics()
        g = gpu_util()
        now = time.time()
        cur = cpu_ticks()
        parts = []
        if prev_t:
            dt = now - prev_t
            for pid, tk in cur.items():
                pct = 100.0 * (tk - prev.get(pid, tk)) / HZ / dt
                if pct >= 3:
                    if pid not in labels:
                        labels[pid] = label(pid)
                    if labels[pid]:
                        parts.append(f"{labels[pid]}/{pid}={pct:.0f}")
        prev, prev_t = cur, now
        kv = " ".join(f"{k}={vals[k]:.6g}" for k in WANT.values() if k in vals)
        with (W / "samples.txt").open("a") as fh:
            fh.write(
                f"{t:.2f} {kv} gpu={g} conns={conns()} mlat={mlat:.3f} cpu={','.join(parts)}\n"
            )
        time.sleep(max(0.0, 1.0 - (time.time() - t)))


if __name__ == "__main__":
    main()
