"""status.yml's own tasks, run by a real ansible-playbook on the controller with what the Spark
would have answered: each batch job's progress line printed, the batch API's batches gathered
when the inventory turns it on (null when off), and its settings' fallbacks the role's own.

The reading tasks need a Spark (systemctl, vLLM, the batch API); their registered results are
given here in the shapes Ansible registers them, and status.yml's gathering and printing tasks
run as they are in the playbook."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from tests.plugins.playbook import PLAYBOOKS, REPO, run_playbook

STATUS_TASKS = yaml.safe_load((PLAYBOOKS / "status.yml").read_text())[-1]["tasks"]
STATUS_VARS = yaml.safe_load((PLAYBOOKS / "vars" / "status.yml").read_text())
CLI_DEFAULTS = yaml.safe_load((REPO / "ansible/roles/sparkops_cli/defaults/main.yml").read_text())
SHARED = yaml.safe_load((REPO / "ansible/roles/sparkops_defaults/defaults/main.yml").read_text())
LINE = (
    "sparkops: 1,200/2,000 finished: 1,190 done, 10 errors, 64 in flight; 310 records/min; "
    "prefix cache hit 87.5%; ETA 0:02:35"
)
SECRET = "sk-status-never-shown"


def task(name: str) -> dict:
    (found,) = [t for t in STATUS_TASKS if t.get("name") == name]
    return found


def registered(batch_api: bool) -> dict:
    """What the reading tasks register on a Spark with one running job (and, on, the API)."""
    rows = [
        {
            "name": "triage",
            "out": "/home/researcher/triage",
            "unit": "sparkops-batch-triage.service",
            "state": {"state": "active (running)", "why": "unit ...: running"},
            "job": {"done": 1190, "errors": 10, "remaining": 800, "total": 2000},
            "progress": {"line": LINE, "at": "2026-12-03T10:00:00Z"},
        }
    ]
    page = {
        "object": "list",
        "data": [
            {
                "id": "batch_abc",
                "status": "in_progress",
                "request_counts": {"total": 100, "completed": 40, "failed": 1},
                "metadata": {"note": "never shown"},
            }
        ],
        "has_more": False,
    }
    skipped = {"skipped": True, "changed": False}
    return {
        "sparkops_status_batch_api": batch_api,
        "sparkops_status_batch_api_url": "http://127.0.0.1:8090",
        "sparkops_status_vllm_url": "http://127.0.0.1:8000",
        "vllm_serving_api_key": SECRET,
        "__sparkops_status_unit": {
            "stdout": "LoadState=loaded\nActiveState=active\nSubState=exited"
        },
        "__sparkops_status_health": {"status": 200},
        "__sparkops_status_metrics": {"content": ""},
        "__sparkops_status_gpu": {"stdout": "2405, 95.1, 99"},
        "__sparkops_status_jobs": {"rc": 0, "stdout": json.dumps(rows)},
        "__sparkops_status_batch_api_unit": (
            {"stdout": "LoadState=loaded\nActiveState=active\nSubState=running\nNRestarts=1"}
            if batch_api
            else skipped
        ),
        "__sparkops_status_batch_api": {"status": 200, "json": page} if batch_api else skipped,
    }


def test_status_yml_prints_each_job_s_line_and_lists_the_batch_api_s_batches(
    tmp_path: Path,
) -> None:
    hosts = {"spark-on": registered(True), "spark-off": registered(False)}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    write = {
        "name": "Write what status.yml gathered",
        "ansible.builtin.copy": {
            "content": "{{ sparkops_status | to_json }}",
            "dest": str(tmp_path) + "/{{ inventory_hostname }}.json",
            "mode": "0600",
        },
    }
    play = {
        "name": "status.yml's gathering and printing",
        "hosts": "all",
        "connection": "local",
        "gather_facts": False,
        "tasks": [
            task("Gather the status"),
            task("Print each batch job's progress line"),
            write,
        ],
    }
    (tmp_path / "filter_plugins").symlink_to(PLAYBOOKS / "filter_plugins")
    (tmp_path / "status.yml").write_text(yaml.safe_dump([play]), encoding="utf-8")
    done = run_playbook(
        tmp_path / "status.yml",
        inventory,
        extra_vars={"ansible_python_interpreter": sys.executable},
        timeout=120,
    )
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-2000:]
    said = json.loads((tmp_path / "spark-on.json").read_text())
    assert said["batch_api"] == {
        "unit": "active (running)",
        "restarts": 1,
        "url": "http://127.0.0.1:8090",
        "batches": [
            {
                "id": "batch_abc",
                "status": "in_progress",
                "request_counts": {"total": 100, "completed": 40, "failed": 1},
            }
        ],
        "has_more": False,
    }
    assert said["jobs"][0]["progress"]["line"] == LINE
    assert json.loads((tmp_path / "spark-off.json").read_text())["batch_api"] is None
    # the very line the job wrote to its journal, once per job and host
    printed = f"triage (active (running)): {LINE} [journal 2026-12-03T10:00:00Z]"
    assert done.stdout.count(printed) == 2, done.stdout[-3000:]
    assert SECRET not in done.stdout + done.stderr
    assert "never shown" not in (tmp_path / "spark-on.json").read_text()


def test_the_key_query_is_kept_out_of_the_output() -> None:
    """The request to the batch API carries the serving stack's key in a header: no_log."""
    asked = task("Ask the batch API for its batches")
    assert asked["no_log"] is True and "vllm_serving_api_key" in json.dumps(asked)
    assert asked["when"] == "sparkops_status_batch_api | bool"
    assert asked["ansible.builtin.uri"]["url"].endswith("/v1/batches?limit=100")


def test_the_batch_api_settings_fall_back_to_the_role_s_defaults() -> None:
    """status.yml does not load the sparkops_cli role: the inventory's switch, address and port
    are read with fallbacks, which must be that role's defaults."""
    switch = re.fullmatch(
        r"\{\{ sparkops_cli_batch_api \| default\((.+), true\) \}\}",
        STATUS_VARS["sparkops_status_batch_api"],
    )
    assert switch and yaml.safe_load(switch.group(1)) == CLI_DEFAULTS["sparkops_cli_batch_api"]
    assert STATUS_VARS["sparkops_status_batch_api_url"] == "{{ sparkops_defaults_batch_api_url }}"
    url = SHARED["sparkops_defaults_batch_api_url"]
    address = CLI_DEFAULTS["sparkops_cli_batch_api_address"]
    assert f"sparkops_cli_batch_api_address | default('{address}', true)" in url
    assert f"default({CLI_DEFAULTS['sparkops_cli_batch_api_port']}, true)" in url
