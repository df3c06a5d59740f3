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


# status.yml's other words: each batch job's progress line, the batch API's batches.

STATUS_LINE = (
    "sparkops: 60/200 finished: 60 done, 0 errors, 4 in flight; 120 records/min; "
    "prefix cache hit 91.0%; ETA 0:01:10"
)


def test_each_job_gets_one_line_with_its_journal_s_progress_line() -> None:
    jobs = [
        {
            "name": "triage",
            "state": {"state": "active (running)"},
            "job": {"done": 60, "errors": 0, "remaining": 140, "total": 200},
            "progress": {"line": STATUS_LINE, "at": "2026-12-03T10:00:00Z"},
        },
        {
            "name": "waiting",
            "state": {"state": "activating (start-pre)"},
            "job": {"done": 0, "errors": 0, "remaining": 50, "total": 50},
            "progress": None,
        },
    ]
    assert status.sparkops_job_progress_lines(jobs) == [
        f"triage (active (running)): {STATUS_LINE} [journal 2026-12-03T10:00:00Z]",
        "waiting (activating (start-pre)): no progress line in its journal yet; 0 done, "
        "0 errors, 50 remaining of 50 (job folder)",
    ]
    assert status.sparkops_job_progress_lines("") == []  # `batch units` failed: no jobs


def api_show(active: str = "active", sub: str = "running", restarts: str = "0") -> str:
    return f"LoadState=loaded\nActiveState={active}\nSubState={sub}\nNRestarts={restarts}\n"


URL = "http://127.0.0.1:8090"


def test_the_batch_api_lists_each_batch_s_id_status_and_counts_only() -> None:
    page = {
        "object": "list",
        "data": [
            {
                "id": "batch_abc",
                "object": "batch",
                "status": "in_progress",
                "request_counts": {"total": 100, "completed": 40, "failed": 1},
                "metadata": {"study": "a researcher's own words"},
                "input_file_id": "file-1",
            },
            {
                "id": "batch_old",
                "status": "completed",
                "request_counts": {"total": 5, "completed": 5, "failed": 0},
            },
        ],
        "has_more": True,
    }
    said = status.sparkops_batch_api_status(api_show(restarts="2"), {"status": 200, "json": page},
                                            URL)  # fmt: skip
    assert said == {
        "unit": "active (running)",
        "restarts": 2,
        "url": URL,
        "batches": [
            {
                "id": "batch_abc",
                "status": "in_progress",
                "request_counts": {"total": 100, "completed": 40, "failed": 1},
            },
            {
                "id": "batch_old",
                "status": "completed",
                "request_counts": {"total": 5, "completed": 5, "failed": 0},
            },
        ],
        "has_more": True,
    }


@pytest.mark.parametrize(
    ("show", "answer", "error"),
    [
        (api_show(), {"status": 401, "json": {"error": {}}}, "refused the key status.yml sent"),
        (api_show("failed", "failed"), {"status": -1, "msg": "Connection refused"},
         "nothing answers at http://127.0.0.1:8090: `journalctl -u sparkops-openai-batch"),
        (api_show(), {"status": 200, "content": "<html>"}, "with no list of batches"),
        (api_show(), {"status": 503}, "answered HTTP 503 to GET /v1/batches"),
        (api_show(), None, "nothing answers"),  # the task was skipped
    ],
)  # fmt: skip
def test_a_batch_api_that_lists_nothing_says_why(show: str, answer: object, error: str) -> None:
    said = status.sparkops_batch_api_status(show, answer, URL)
    assert "batches" not in said and error in said["error"], said
    assert said["unit"] == f"{status._properties(show)['ActiveState']} " + (
        f"({status._properties(show)['SubState']})"
    )


def test_a_batch_api_never_installed_says_how_to_turn_it_on() -> None:
    for show in ("LoadState=not-found\nActiveState=inactive\nSubState=dead\n", ""):
        said = status.sparkops_batch_api_status(show, {"status": -1}, URL)
        assert said["unit"] == "absent"
        assert "sparkops_cli_batch_api: true" in said["error"]
