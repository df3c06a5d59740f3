"""`sparkops batch notify` (sparkops.jobunit.notify): one JSON POST per finish, stop, stall and
spent restart budget, received by a real HTTP server on loopback; names, kinds and counts
only, never a record's text, never the URL's token."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import pytest

from sparkops.errors import UserError
from sparkops.jobdir.folder import MANIFEST
from sparkops.jobunit import notify
from sparkops.jobunit.state import parse_show
from tests.plugins.cli import sparkops
from tests.plugins.job_dir import manifest

UNIT = "sparkops-batch-triage.service"
RECORD_TEXT = "Headache for a week, no focal signs"


@contextmanager
def receiver(code: int = 204) -> Iterator[tuple[str, list[dict]]]:
    """A local receiver: every POST body, parsed, in the list."""
    bodies: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook?token=tok-secret", bodies
    finally:
        server.shutdown()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A job folder three records long, its first run stopped by stalls, a record's text in
    its input (which the notification must never carry)."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / MANIFEST).write_text(json.dumps(asdict(manifest(total=3))))
    events = [{"event": "start", "run": 1, "t": 1.0},
              {"event": "end", "run": 1, "t": 2.0, "stopped": "stalled"}]  # fmt: skip
    (folder / "runs.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "n1", "text": RECORD_TEXT}) + "\n")
    return folder


def fake_systemd(monkeypatch: pytest.MonkeyPatch, show: str | None) -> None:
    monkeypatch.setattr(
        notify, "show_unit", lambda unit: None if show is None else parse_show(show)
    )


def test_each_stop_is_its_event(monkeypatch: pytest.MonkeyPatch, job: Path) -> None:
    fake_systemd(monkeypatch, "ActiveState=activating\nSubState=auto-restart\nNRestarts=1\n")
    cases = {
        ("exited", "0"): "finished",
        ("exited", "3"): "finished-with-errors",
        ("exited", "1"): "stalled",  # the job log says the run stopped on stalls
        ("exited", "2"): "stopped",
        ("exited", "143"): "stopped",
        ("killed", "KILL"): "stopped",
        ("", ""): "stopped",  # the wait before the job ran out
    }
    with receiver() as (url, bodies):
        for (code, status), event in cases.items():
            env = {"EXIT_CODE": code, "EXIT_STATUS": status}
            body, failed = notify.notify(job, UNIT, url, env)
            assert failed is None and body is not None and body["event"] == event, (code, body)
    assert [b["event"] for b in bodies] == list(cases.values())
    first = bodies[0]
    assert set(first) == {"job", "host", "event", "reason", "exit_status", "state", "restarts",
                          "counts", "time"}  # fmt: skip
    assert first["job"] == "triage" and first["reason"] == "every record done"
    assert first["counts"] == {"total": 3, "done": 0, "errors": 0, "record_errors": 0,
                               "remaining": 3, "runs": 1, "complete": False}  # fmt: skip
    assert (first["state"], first["restarts"]) == ("activating (auto-restart)", 1)
    assert "--retry-errors" in bodies[1]["reason"]
    assert bodies[2]["reason"].startswith("stopped part-way (stalled), exit 1")
    assert "killed by SIGKILL" in bodies[5]["reason"]
    assert "did not answer before the start's bound" in bodies[6]["reason"]
    sent = json.dumps(bodies)
    assert RECORD_TEXT not in sent and "tok-secret" not in sent


def test_only_a_spent_budget_is_said_on_failure(monkeypatch: pytest.MonkeyPatch, job: Path) -> None:
    with receiver() as (url, bodies):
        fake_systemd(
            monkeypatch, "ActiveState=failed\nNRestarts=5\nExecMainCode=1\nExecMainStatus=1\n"
        )
        body, _ = notify.notify(job, UNIT, url, {}, on_failure=True)
        assert body is not None and body["event"] == "restart-budget-spent"
        assert "spent after exit 1 (stopped part-way, resumable, stalled)" in body["reason"]
        fake_systemd(monkeypatch, "ActiveState=failed\nExecMainCode=1\nExecMainStatus=2\n")
        assert notify.notify(job, UNIT, url, {}, on_failure=True) == (None, None)
        # systemd 251+ hands the failed unit's exit to its OnFailure unit: no D-Bus needed
        fake_systemd(monkeypatch, None)
        monitor = {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "killed",
                   "MONITOR_EXIT_STATUS": "KILL"}  # fmt: skip
        body, _ = notify.notify(job, UNIT, url, monitor, on_failure=True)
        assert body is not None and "spent after killed by SIGKILL" in body["reason"]
        pre = {"MONITOR_SERVICE_RESULT": "exit-code", "MONITOR_EXIT_CODE": "",
               "MONITOR_EXIT_STATUS": ""}  # fmt: skip
        body, _ = notify.notify(job, UNIT, url, pre, on_failure=True)
        assert body is not None and "spent after the serving stack never answered" in body["reason"]
        config = {**monitor, "MONITOR_EXIT_CODE": "exited", "MONITOR_EXIT_STATUS": "2"}
        assert notify.notify(job, UNIT, url, config, on_failure=True) == (None, None)
        assert notify.notify(job, UNIT, url, {}, on_failure=True) == (None, None)  # unknown
    assert [b["event"] for b in bodies] == ["restart-budget-spent"] * 3


def test_a_receiver_that_refuses_or_is_absent_is_named_without_the_token(
    monkeypatch: pytest.MonkeyPatch, job: Path
) -> None:
    fake_systemd(monkeypatch, None)
    env = {"EXIT_CODE": "exited", "EXIT_STATUS": "0"}
    with receiver(code=500) as (url, _):
        body, failed = notify.notify(job, UNIT, url, env)
    assert body is not None and body["state"] is None  # systemd not asked: still sent
    assert failed is not None and failed.endswith("answered HTTP 500")
    assert "tok-secret" not in failed and "token=***" in failed
    with pytest.raises(UserError, match="not http:// or https://"):
        notify.notify(job, UNIT, "file:///etc/passwd", env)


def test_the_command_sends_nothing_without_a_url_and_says_where_it_sent(job: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "EXIT_CODE": "exited", "EXIT_STATUS": "0"}
    quiet = sparkops("batch", "notify", str(job), "--unit", UNIT, limit=60, env=env)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    with receiver() as (url, bodies):
        sent = sparkops("batch", "notify", str(job), "--unit", UNIT, limit=60,
                        env={"PATH": "/usr/bin:/bin", "SPARKOPS_NOTIFY_URL": url,
                             "EXIT_CODE": "exited", "EXIT_STATUS": "1"})  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert "stalled notification sent to http://127.0.0.1:" in sent.stdout
    assert "tok-secret" not in sent.stdout + sent.stderr
    assert [b["event"] for b in bodies] == ["stalled"]
