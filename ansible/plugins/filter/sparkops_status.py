"""Ansible filters: what status.yml says about the serving unit, each batch job's progress and
the batch API's batches.

    {{ unit_show.stdout | default('') | sparkops_serving_state(health_status) }}

takes `systemctl show --property=LoadState,ActiveState,SubState <unit>` and the HTTP status of
vLLM's /health (-1 when nothing answered) and returns {unit, stack}:

- `unit`: systemd's own words, "ActiveState (SubState)", or "absent" when the unit is not
  installed. The serving unit is a oneshot with RemainAfterExit: once `docker compose up -d`
  has returned it stays "active (exited)" for as long as the stack is started, so "exited" there
  is the normal state of a running stack, not a stopped one (service_facts calls it "stopped").
- `stack`: one word a user can act on, judged from both: "serving" (started, /health 200),
  "starting or down" (started, /health not 200: vLLM still loads, or its container stopped;
  logs.yml says which), "stopped" (the unit is inactive: teardown or `systemctl stop`),
  "failed" (the unit's start failed: `journalctl -u <unit>`), "absent" (never deployed here),
  or the unit's state itself when it is another one (activating, deactivating, ...).

    {{ jobs | sparkops_job_progress_lines }}

one line per batch job (rows of `sparkops batch units --json`): its name, its unit's state and
the newest status line of its journal, the very line `journalctl -u` shows on the Spark
(sparkops.jobunit.progress.progress_sentence).

    {{ unit_show.stdout | default('') | sparkops_batch_api_status(answer, url) }}

the batch API (`sparkops batch serve` as sparkops-openai-batch.service): its unit's state and
restarts, and from its own `GET /v1/batches` (the registered uri result) each batch's id,
status and request_counts, the figures an openai client reads; else one sentence with the fix.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
try:
    from sparkops.jobunit.progress import progress_sentence
    from sparkops.jobunit.serve_unit import SERVE_UNIT
except ImportError as exc:  # pragma: no cover - depends on the controller's environment
    raise AnsibleFilterError(
        f"sparkops_status needs the kit's dependencies on the controller ({exc}): run "
        "ansible-playbook from the kit's .venv (make venv)"
    ) from exc

BATCH_FIELDS = ("id", "status", "request_counts")


def _properties(show: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in str(show or "").splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def sparkops_serving_state(show: str, health: Any = -1) -> dict[str, str]:
    """{unit, stack} for the serving unit (see the module docstring)."""
    props = _properties(show)
    if props.get("LoadState", "not-found") == "not-found":
        return {"unit": "absent", "stack": "absent"}
    active = props.get("ActiveState", "unknown")
    unit = f"{active} ({props.get('SubState', 'unknown')})"
    try:
        healthy = int(health) == 200
    except (TypeError, ValueError):
        healthy = False
    if active in ("active", "reloading"):
        stack = "serving" if healthy else "starting or down"
    elif active == "inactive":
        stack = "stopped"
    elif active == "failed":
        stack = "failed"
    else:
        stack = active
    return {"unit": unit, "stack": stack}


def sparkops_job_progress_lines(jobs: Any) -> list[str]:
    """One line per job row of `sparkops batch units --json` (see the module docstring)."""
    if not isinstance(jobs, list):
        return []
    return [progress_sentence(row) for row in jobs if isinstance(row, Mapping)]


def _batch_api_problem(status: int, url: str) -> str:
    if status == 401:
        return (
            f"the batch API at {url} refused the key status.yml sent: the unit's key file holds "
            "another one; run provision.yml --tags sparkops_cli so it takes vllm_serving_api_key"
        )
    if status < 0:
        return (
            f"nothing answers at {url}: `journalctl -u {SERVE_UNIT}` on the Spark says why "
            "(`systemctl status` for its state)"
        )
    return f"the batch API at {url} answered HTTP {status} to GET /v1/batches"


def sparkops_batch_api_status(show: str, answer: Any, url: str) -> dict[str, Any]:
    """{unit, restarts, url, batches, has_more} or, where there are none to list, {unit,
    restarts, url, error} (see the module docstring)."""
    props = _properties(show)
    if props.get("LoadState", "not-found") == "not-found":
        return {
            "unit": "absent",
            "url": url,
            "error": f"{SERVE_UNIT} is not installed: set sparkops_cli_batch_api: true and run "
            "provision.yml --tags sparkops_cli",
        }
    found: dict[str, Any] = {
        "unit": f"{props.get('ActiveState', 'unknown')} ({props.get('SubState', 'unknown')})",
        "restarts": int(props["NRestarts"]) if props.get("NRestarts", "").isdigit() else 0,
        "url": url,
    }
    answer = answer if isinstance(answer, Mapping) else {}
    try:
        status = int(answer.get("status", -1))
    except (TypeError, ValueError):
        status = -1
    page = answer.get("json")
    if status != 200 or not isinstance(page, Mapping) or not isinstance(page.get("data"), list):
        problem = _batch_api_problem(status, url)
        if status == 200:
            problem = f"the batch API at {url} answered GET /v1/batches with no list of batches"
        return {**found, "error": problem}
    batches = [
        {name: batch.get(name) for name in BATCH_FIELDS}
        for batch in page["data"]
        if isinstance(batch, Mapping)
    ]
    return {**found, "batches": batches, "has_more": bool(page.get("has_more"))}


class FilterModule:
    """Registers the filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sparkops_serving_state": sparkops_serving_state,
            "sparkops_job_progress_lines": sparkops_job_progress_lines,
            "sparkops_batch_api_status": sparkops_batch_api_status,
        }
