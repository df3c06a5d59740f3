"""Ansible filter `sparkops_serving_state`: what status.yml says about the serving unit.

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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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


class FilterModule:
    """Registers the filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sparkops_serving_state": sparkops_serving_state}
