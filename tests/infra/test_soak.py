"""The soak's short version (issue 39 item 5): benchmarks/soak.py, bounded by counts.

The same script as the hour-long soak: the kit installed on a systemd test host runs a job as
its unit against a real vLLM-CPU stack that deploy.yml started here, and faults come at equal
shares of the records: the job's client killed, a power cycle of its host, vLLM killed. Nobody
touches it: it must finish by itself with every record exactly once, each `done`.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import soak

pytestmark = [pytest.mark.infra, pytest.mark.timeout(2400)]


def test_a_job_left_alone_outlives_a_kill_a_power_cycle_and_a_dead_server(
    tmp_path, docker_engine, capsys
):
    report = tmp_path / "soak.json"
    code = soak.main(
        [
            "--records", "600",
            "--concurrency", "2",
            "--free-tokens", "16",
            "--faults", "job_killed,reboot,vllm_killed",
            "--restart-delay-s", "5",
            "--deadline-minutes", "30",
            "--work", str(tmp_path),
            "--report", str(report),
        ]
    )  # fmt: skip
    said = capsys.readouterr().out
    result = json.loads(report.read_text())
    assert code == 0, said
    assert result["problems"] == [] and result["ids_once"] is True, said
    assert result["statuses"] == {"done": 600}, said
    assert [f["kind"] for f in result["faults"]] == ["job_killed", "reboot", "vllm_killed"]
    # every fault was ridden out: the job made progress again after each
    assert all(s is not None and s >= 0 for s in result["stopped_s"]), said
    assert result["runs"] >= 3  # the kill and the power cycle each started a new run
