"""A running job's own /metrics (issue 41 item 1, `batch run --metrics-port PORT`), against the
fault server: served on loopback only while the job runs, with its live figures (calls in
flight per step, pace, ETA) over the folder's, which `batch metrics DIR` says the same once it
has stopped; a port in use stops the job before any request; and a real Prometheus (Debian's
binary) scrapes it and loads the kit's rules.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.plugins.cli import batch_run, finish, sparkops, start, wait_for
from tests.plugins.fault_server import free_port, hang, write_records
from tests.plugins.prometheus import rule_names, running_prometheus


def scrape(port: int) -> dict[tuple[str, frozenset], float] | None:
    """The job's /metrics as (name, labels) -> value; None while nothing answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k != "job_folder")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def figure(page: dict | None, name: str, **labels: str) -> float | None:
    return None if page is None else page.get((name, frozenset(labels.items())))


def listening_on(port: int) -> list[str]:
    """The local addresses of the sockets listening on `port` (/proc/net/tcp, tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


def test_a_running_job_serves_its_figures_on_loopback_and_batch_metrics_agrees(fault_server, job):
    write_records(job["input"], 8)
    fault_server.content = "yes"
    for held in ("r7", "r8"):
        fault_server.script(held, hang())
    port = free_port()
    t0 = time.monotonic()
    proc = start(*batch_run(job, fault_server.url, extra=("--metrics-port", str(port))))
    try:
        pages: list[dict] = []

        def six_done_two_held() -> bool:
            page = scrape(port)
            pages.append(page or {})
            return (
                figure(page, "sparkops_job_records_done_total") == 6
                and figure(page, "sparkops_job_step_calls_in_flight", step="screen") == 2
            )

        wait_for(six_done_two_held, 60, "6 records done and 2 calls in flight on /metrics")
        page = pages[-1]
        assert listening_on(port) == ["0100007F"]  # 127.0.0.1 only
        assert figure(page, "sparkops_job_running") == 1
        assert figure(page, "sparkops_job_input_records") == 8
        assert figure(page, "sparkops_job_records_remaining") == 2
        assert figure(page, "sparkops_job_runs_total") == 1
        assert figure(page, "sparkops_job_step_answers_total", step="screen") == 6
        assert figure(page, "sparkops_job_eta_seconds") is not None
        assert figure(page, "sparkops_job_endpoint_stalled", endpoint=fault_server.url) == 0
        served = [k for k in page if k[0] == "sparkops_job_serving_info"]
        assert len(served) == 1 and ("model", "tiny") in served[0][1]
        fault_server.release()  # the held calls are answered: the job finishes
        status, _, stderr = finish(proc, t0, 90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert status == 0, stderr
    assert scrape(port) is None  # nothing listens once the job is over
    after = sparkops("batch", "metrics", str(job["out"]), limit=60, check=True).stdout
    final = {
        (s.name, frozenset((k, v) for k, v in s.labels.items() if k != "job_folder")): s.value
        for family in text_string_to_metric_families(after)
        for s in family.samples
    }
    assert figure(final, "sparkops_job_records_done_total") == 8
    assert figure(final, "sparkops_job_running") == 0
    assert figure(final, "sparkops_job_step_calls_in_flight", step="screen") is None
    for name in ("sparkops_job_runs_total", "sparkops_job_input_records"):
        assert figure(final, name) == figure(page, name)


def test_a_port_in_use_stops_the_job_before_any_request(fault_server, job):
    write_records(job["input"], 3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = sparkops(*batch_run(job, fault_server.url, extra=("--metrics-port", str(port))))
    assert done.returncode == 2
    assert done.stderr.startswith(f"sparkops: error: --metrics-port {port}: cannot listen")
    assert "pass another port" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sum(fault_server.paths.values()) == 0  # not even /v1/models
    assert not job["out"].exists()


def test_a_real_prometheus_scrapes_the_job_and_loads_the_kits_rules(fault_server, job, tmp_path):
    write_records(job["input"], 4)
    fault_server.content = "yes"
    fault_server.script("r4", hang())
    job_port = free_port()
    with running_prometheus(tmp_path, {"sparkops_job": f"http://127.0.0.1:{job_port}"}) as prom:
        t0 = time.monotonic()
        proc = start(*batch_run(job, fault_server.url, extra=("--metrics-port", str(job_port))))
        try:
            prom.poll(
                lambda: prom.values("sparkops_job_records_done_total"),
                lambda done: done == {"sparkops_job": "3"},
                "3 records done, scraped from the job",
            )
            assert prom.values("up") == {"sparkops_job": "1"}
            (running,) = prom.query("sparkops_job_running")
            assert running["metric"]["job_folder"] == job["out"].name
            rules = prom.poll(
                prom.rules,
                lambda rules: rules and all(r["health"] == "ok" for r in rules),
                "the kit's rules loaded and evaluated",
            )
            assert len(rules) == 15 and {r["name"] for r in rules} == rule_names()
            fault_server.release()
            status, _, stderr = finish(proc, t0, 90)
            assert status == 0, stderr
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
