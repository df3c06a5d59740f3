"""status.yml's word for the serving unit (ansible/plugins/filter/sparkops_status.py).

The unit is a oneshot with RemainAfterExit: a started stack is "active (exited)", which reads
like a stopped one. The filter keeps systemd's words in `unit` and adds `stack`, judged from
the unit and vLLM's /health together. The inputs are `systemctl show` output as systemd prints
it for each state.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "ansible/plugins/filter/sparkops_status.py"
_spec = importlib.util.spec_from_file_location("sparkops_status", PLUGIN)
assert _spec and _spec.loader
status = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(status)


def show(load: str, active: str, sub: str) -> str:
    return f"LoadState={load}\nActiveState={active}\nSubState={sub}\n"


@pytest.mark.parametrize(
    ("unit", "health", "expected"),
    [
        (show("loaded", "active", "exited"), 200, ("active (exited)", "serving")),
        (show("loaded", "active", "exited"), "200", ("active (exited)", "serving")),
        (show("loaded", "active", "exited"), -1, ("active (exited)", "starting or down")),
        (show("loaded", "active", "exited"), 503, ("active (exited)", "starting or down")),
        (show("loaded", "inactive", "dead"), 200, ("inactive (dead)", "stopped")),
        (show("loaded", "failed", "failed"), -1, ("failed (failed)", "failed")),
        (show("loaded", "activating", "start"), -1, ("activating (start)", "activating")),
        # systemd answers for a unit it does not know, with exit status 0
        (show("not-found", "inactive", "dead"), -1, ("absent", "absent")),
        ("", -1, ("absent", "absent")),  # systemctl missing or refused: nothing printed
    ],
)
def test_the_unit_state_and_health_give_one_word(
    unit: str, health: int | str, expected: tuple[str, str]
) -> None:
    result = status.sparkops_serving_state(unit, health)
    assert (result["unit"], result["stack"]) == expected
