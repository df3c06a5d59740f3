"""batch.yml's job unit on a real systemd test host (issue 39 item 1): the job outlives the host.

The kit is installed by provision.yml (the sparkops_cli tag, as in test_sparkops_cli_role.py);
the serving stack is a stand-in enabled as `sparkops-serving.service` (batch_unit_server.py:
it answers like vLLM serving `tiny`, and as its mode file says: hold, down, reject, a budget of
answers), so after a reboot it comes back as the kit's own does. A reboot here is a power
cycle: the host container is killed (SIGKILL: no clean stop of any unit) and started again,
and systemd boots anew. A local receiver on the host records the notifications.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.infra.test_sparkops_cli_role import (  # noqa: F401 (kit_installed: the fixture)
    VENV,
    Installed,
    kit_installed,
)
from tests.plugins.hosts import READY_STATES, Host, run_docker
from tests.plugins.playbook import PlaybookRun, run_playbook
from tests.plugins.provision import JOB_USER

pytestmark = [pytest.mark.long, pytest.mark.infra, pytest.mark.timeout(2400)]

SERVER = Path(__file__).with_name("batch_unit_server.py")
PORT = 18100
URL = f"http://127.0.0.1:{PORT}"
RECEIVER_PORT = 18200
RECEIVED = "/var/lib/receiver/bodies.jsonl"
SAMPLES = f"{VENV}/lib/python3.11/site-packages/sparkops/samples"
SECRET = "sk-unit-key-never-shown"
NOTIFY_TOKEN = "hook-token-never-shown"
RECORD_WORDS = ("Triage note", "Headache", "GP referral")  # text of the sample's records
TOTAL = 300  # records in the sample input

RECEIVER = f"""
import http.server
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open({RECEIVED!r}, "ab") as fh:
            fh.write(body + b"\\n")
        self.send_response(204)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", {RECEIVER_PORT}), Handler).serve_forever()
"""


def _unit_file(name: str, exec_start: str) -> str:
    return (
        f"[Unit]\nDescription={name}\n[Service]\nExecStart={exec_start}\nRestart=always\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


@pytest.fixture(scope="module")
def bed(kit_installed: Installed) -> Installed:  # noqa: F811 (the imported fixture)
    """The installed host with the serving stand-in and the receiver, both enabled."""
    host = kit_installed.host
    run_docker("cp", str(SERVER), f"{host.id}:/usr/local/lib/fake-serving.py")
    host.exec("mkdir -p /var/lib/fake-serving /var/lib/receiver", check=True)
    host.exec(["tee", "/usr/local/lib/receiver.py"], input=RECEIVER, check=True)
    units = {
        "sparkops-serving.service": f"/usr/bin/python3 /usr/local/lib/fake-serving.py {PORT}",
        "receiver.service": "/usr/bin/python3 /usr/local/lib/receiver.py",
    }
    for unit, command in units.items():
        host.exec(["tee", f"/etc/systemd/system/{unit}"], input=_unit_file(unit, command),
                  check=True)  # fmt: skip
    host.exec("systemctl daemon-reload && systemctl enable --now sparkops-serving receiver",
              check=True)  # fmt: skip
    return kit_installed


def set_mode(host: Host, mode: str) -> None:
    host.exec(["tee", "/var/lib/fake-serving/mode"], input=mode, check=True)


def job_vars(name: str, **more: object) -> dict:
    return {
        "sparkops_batch_name": name,
        "sparkops_batch_pipeline": f"{SAMPLES}/stroke-triage.yaml",
        "sparkops_batch_input": f"{SAMPLES}/triage_notes.jsonl",
        "sparkops_batch_out": f"/home/{JOB_USER}/{name}",
        "sparkops_batch_endpoints": [URL],
        "sparkops_batch_concurrency": 4,
        "sparkops_batch_stack_record": "",
        "sparkops_batch_restart_delay_s": 1,
        "sparkops_batch_restart_window_s": 600,
        "sparkops_batch_serving_wait_s": 30,
        "sparkops_batch_start_wait": 120,
        **more,
    }


def batch(bed: Installed, extra: dict, *args: str) -> PlaybookRun:
    return run_playbook("batch.yml", bed.inventory, *args, extra_vars=extra, timeout=600)


def show(host: Host, unit: str) -> dict[str, str]:
    props = "ActiveState,SubState,NRestarts,ExecMainCode,ExecMainStatus,UnitFileState,LoadState"
    out = host.exec(["systemctl", "show", f"--property={props}", unit]).stdout
    return dict(tuple(line.split("=", 1)) for line in out.splitlines() if "=" in line)


def status(host: Host, out: str, *flags: str) -> tuple[int, str]:
    """`sparkops batch status` as root: the test host has no D-Bus daemon, so only root
    reaches systemd (its private socket); on a Spark the job user reads the unit as well."""
    run = host.exec([f"{VENV}/bin/sparkops", "batch", "status", out, *flags])
    return run.returncode, run.stdout + run.stderr


def status_json(host: Host, out: str) -> dict:
    rc, text = status(host, out, "--json")
    return json.loads(text) if rc == 0 else {}


def wait_until(what: str, check: Callable[[], bool], host: Host, unit: str, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    log = host.exec(["journalctl", "-u", unit, "--no-pager", "-n", "60"]).stdout
    pytest.fail(f"{what} did not happen within {timeout:.0f} s; {unit} said:\n{log[-4000:]}")


def power_cycle(host: Host, mode: str | None = None) -> None:
    """Kill the host (no unit stops cleanly), optionally set the stand-in's mode while it is
    off, and boot it again."""
    run_docker("kill", host.id)
    if mode is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".mode", delete=False) as fh:
            fh.write(mode)
        run_docker("cp", fh.name, f"{host.id}:/var/lib/fake-serving/mode")
        Path(fh.name).unlink()
    run_docker("start", host.id)
    deadline = time.monotonic() + 120
    while host.system_state() not in READY_STATES:
        assert time.monotonic() < deadline, host.exec("systemctl --failed").stdout
        time.sleep(1)


def result_ids(host: Host, out: str) -> Counter[str]:
    text = host.exec(["cat", f"{out}/results.jsonl"]).stdout
    return Counter(json.loads(line)["id"] for line in text.splitlines() if line.strip())


def received(host: Host) -> list[dict]:
    text = host.exec(["cat", RECEIVED]).stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_job_comes_back_after_a_power_cycle_and_a_finished_job_stays_finished(
    bed, tmp_path: Path
) -> None:
    host = bed.host
    name, unit = "weekend", "sparkops-batch-weekend.service"
    out = f"/home/{JOB_USER}/{name}"
    host.exec("rm -f /var/lib/fake-serving/count", check=True)
    set_mode(host, "budget 40")
    extra = job_vars(
        name,
        # the held calls wait for the power cycle, however long a loaded machine takes to
        # get there: the client's stall rule (exit 1, restart) is the other test's business
        sparkops_batch_extra_args=["--stall-after", "3600"],
        sparkops_batch_api_key=SECRET,
        sparkops_batch_notify_url=f"http://127.0.0.1:{RECEIVER_PORT}/hook?token={NOTIFY_TOKEN}",
    )
    check = batch(bed, extra, "--check")
    assert check.rc == 0, check.stdout[-3000:]
    assert f"would install, enable and start {unit}" in check.stdout
    assert host.exec(["test", "-e", f"/etc/systemd/system/{unit}"]).returncode != 0

    started = batch(bed, extra)
    assert started.rc == 0, started.stdout[-4000:] + started.stderr[-2000:]
    text = started.stdout + started.stderr
    assert SECRET not in text and NOTIFY_TOKEN not in text
    unit_text = host.exec(["cat", f"/etc/systemd/system/{unit}"]).stdout
    assert (
        "WantedBy=multi-user.target" in unit_text
        and "After=network-online.target sparkops-serving.service" in unit_text
    )
    assert "RestartPreventExitStatus=0 2" in unit_text and "SuccessExitStatus=3 143" in unit_text
    # the job user may read the system journal: the host watch reads the driver's errors there
    assert "SupplementaryGroups=systemd-journal" in unit_text
    shown = host.exec(["systemctl", "show", unit]).stdout
    assert SECRET not in unit_text + shown and NOTIFY_TOKEN not in unit_text + shown
    env_file = host.testinfra.file("/etc/sparkops/batch/weekend.env")
    assert (env_file.user, env_file.mode) == ("root", 0o600)
    assert show(host, unit)["UnitFileState"] == "enabled"
    wait_until("40 records done", lambda: status_json(host, out).get("done", 0) >= 40, host, unit)
    again = batch(bed, extra)  # running: left alone, nothing changes
    assert again.rc == 0 and again.changed_on(host.name) == 0, again.stdout[-3000:]

    # The power goes; when the host is back the stand-in answers every call.
    power_cycle(host, mode="answer")
    wait_until("the job to finish after the boot",
               lambda: status_json(host, out).get("complete") is True, host, unit)  # fmt: skip
    ids = result_ids(host, out)
    assert len(ids) == TOTAL and max(ids.values()) == 1  # every record once, none twice
    st = status_json(host, out)
    assert (st["done"], st["errors"], st["runs"]) == (TOTAL, 0, 2), st
    readings = [
        json.loads(x) for x in host.exec(["cat", f"{out}/host.jsonl"]).stdout.split("\n") if x
    ]
    assert readings and not [r for r in readings if "kernel log" in r.get("unknown", {})], readings
    wait_until("the unit to stop", lambda: show(host, unit)["ActiveState"] == "inactive", host,
               unit)  # fmt: skip
    props = show(host, unit)
    assert (props["ExecMainCode"], props["ExecMainStatus"]) == ("1", "0"), props
    assert host.exec(["systemctl", "is-enabled", unit]).stdout.strip() == "disabled"
    rc, said = status(host, out)
    assert rc == 0 and f"unit {unit}: finished" in said, said

    # A finished job is not started again: not by batch.yml, not by the next boot.
    rerun = batch(bed, extra)
    assert rerun.rc == 0 and rerun.changed_on(host.name) == 0, rerun.stdout[-3000:]
    assert "has finished (300 done, 0 errors of 300): it is not started again" in " ".join(
        rerun.stdout.split()
    )
    power_cycle(host)
    time.sleep(5)  # a unit the boot would start begins within seconds; none must
    assert show(host, unit)["ActiveState"] == "inactive"
    assert status_json(host, out)["runs"] == 2

    # status.yml shows the job's unit and progress from the controller.
    shown = run_playbook(
        "status.yml", bed.inventory, extra_vars={"sparkops_status_dir": str(tmp_path)}
    )
    assert shown.rc == 0, shown.stdout[-3000:]
    jobs = {j["name"]: j for j in json.loads((tmp_path / f"{host.name}.json").read_text())["jobs"]}
    # after the boot systemd no longer knows the exit: the job folder says it finished
    assert jobs[name]["state"]["why"].startswith(f"unit {unit}: finished (the job folder"), jobs
    assert (jobs[name]["job"]["done"], jobs[name]["out"]) == (TOTAL, out)
    # the batch API the converge turned on (test_sparkops_cli_role.py) came back at the boot
    # and lists its batches (none here) from its own GET /v1/batches
    api = json.loads((tmp_path / f"{host.name}.json").read_text())["batch_api"]
    assert (api["unit"], api["batches"]) == ("active (running)", []), api

    bodies = received(host)
    finished = [b for b in bodies if b["event"] == "finished"]
    assert finished and finished[-1]["counts"]["done"] == TOTAL and finished[-1]["job"] == name
    dumped = json.dumps(bodies)
    assert SECRET not in dumped and NOTIFY_TOKEN not in dumped
    assert not any(word in dumped for word in RECORD_WORDS)

    removed = batch(bed, {**extra, "sparkops_batch_action": "remove"})
    assert removed.rc == 0, removed.stdout[-3000:]
    assert show(host, unit)["LoadState"] == "not-found"
    assert host.exec(["test", "-e", "/etc/sparkops/batch/weekend.env"]).returncode != 0
    assert status_json(host, out)["done"] == TOTAL  # the job folder stays
    removed_again = batch(bed, {**extra, "sparkops_batch_action": "remove"})
    assert removed_again.rc == 0 and removed_again.changed_on(host.name) == 0


def test_each_exit_status_gets_the_restart_it_should(bed) -> None:
    host = bed.host
    hook = {"sparkops_batch_notify_url": f"http://127.0.0.1:{RECEIVER_PORT}/hook"}

    # Exit 3: finished with record errors; stays stopped, says how to send them again.
    name, unit = "refused", "sparkops-batch-refused.service"
    out = f"/home/{JOB_USER}/{name}"
    set_mode(host, "reject")
    extra = job_vars(name, sparkops_batch_extra_args=["--fail-fast", "0"], **hook)
    assert batch(bed, extra).rc == 0
    wait_until("the job to finish", lambda: show(host, unit)["ActiveState"] == "inactive"
               and status_json(host, out).get("complete") is True, host, unit)  # fmt: skip
    props = show(host, unit)
    assert (props["ExecMainStatus"], props["NRestarts"]) == ("3", "0"), props
    _, said = status(host, out)
    assert "finished with record errors" in said and "--retry-errors" in said, said
    rerun = batch(bed, extra)
    assert rerun.rc == 0 and rerun.changed_on(host.name) == 0
    assert "Send its record errors again with" in " ".join(rerun.stdout.split())
    set_mode(host, "answer")
    retry = {**extra, "sparkops_batch_extra_args": ["--fail-fast", "0", "--retry-errors"]}
    assert batch(bed, retry).rc == 0
    wait_until("the errors to be sent again",
               lambda: status_json(host, out).get("done") == TOTAL, host, unit)  # fmt: skip

    # Exit 1: restarted after its delay, waits for serving without a crash loop, resumes.
    name, unit = "outage", "sparkops-batch-outage.service"
    out = f"/home/{JOB_USER}/{name}"
    set_mode(host, "hold")
    extra = job_vars(name, sparkops_batch_extra_args=["--retry-for", "5"], **hook)
    assert batch(bed, extra).rc == 0
    set_mode(host, "down")

    def restarted_and_waiting() -> bool:
        props = show(host, unit)
        return props.get("NRestarts", "0") != "0" and props.get("SubState") == "start-pre"

    wait_until("a restart that waits for serving", restarted_and_waiting, host, unit)
    _, said = status(host, out)
    assert "waiting for the serving stack to answer" in said and "restarted" in said, said
    set_mode(host, "answer")
    wait_until("the job to finish", lambda: status_json(host, out).get("complete") is True, host,
               unit)  # fmt: skip
    runs = [json.loads(line) for line in host.exec(["cat", f"{out}/runs.jsonl"]).stdout.split()]
    ends = [event.get("stopped") for event in runs if event["event"] == "end"]
    assert ends == ["no-answer", None], runs  # stopped part-way (exit 1), then finished
    assert max(result_ids(host, out).values()) == 1

    # The restart budget: serving never answers, two restarts, then the unit stays failed.
    name, unit = "budget", "sparkops-batch-budget.service"
    set_mode(host, "down")
    extra = job_vars(name, sparkops_batch_restart_limit=2, sparkops_batch_serving_wait_s=3,
                     sparkops_batch_start_wait=5, **hook)  # fmt: skip
    batch(bed, extra)  # may end while the first wait runs, or on its failure
    wait_until("the budget to run out", lambda: show(host, unit)["ActiveState"] == "failed", host,
               unit, timeout=120)  # fmt: skip
    time.sleep(2)  # the OnFailure unit posts its word
    listed = host.exec([f"{VENV}/bin/sparkops", "batch", "units", "--json"]).stdout
    row = {r["name"]: r for r in json.loads(listed)}["budget"]
    assert "the restart budget is spent" in row["state"]["why"], row
    spent = [b for b in received(host) if b["job"] == "budget"]
    assert [b["event"] for b in spent][-1] == "restart-budget-spent", spent
    set_mode(host, "answer")
    resumed = batch(bed, {**extra, "sparkops_batch_serving_wait_s": 30,
                          "sparkops_batch_start_wait": 120})  # fmt: skip
    assert resumed.rc == 0, resumed.stdout[-3000:]
    wait_until("the job to finish", lambda: status_json(host, f"/home/{JOB_USER}/budget")
               .get("complete") is True, host, unit)  # fmt: skip

    # Exit 2 (a pipeline whose prompt files are missing): never restarted.
    name, unit = "misconfigured", "sparkops-batch-misconfigured.service"
    job = f"/home/{JOB_USER}/lonely"
    host.exec(["runuser", "-u", JOB_USER, "--", "mkdir", "-p", job], check=True)
    host.exec(["cp", f"{SAMPLES}/stroke-triage.yaml", f"{job}/pipeline.yaml"], check=True)
    host.exec(["chown", "-R", JOB_USER, job], check=True)
    died = batch(bed, job_vars(name, sparkops_batch_pipeline=f"{job}/pipeline.yaml",
                               sparkops_batch_out=f"{job}/out"))  # fmt: skip
    assert died.rc != 0 and "names a prompt file" in " ".join(died.stdout.split())
    time.sleep(3)  # a restart would come after 1 s
    props = show(host, unit)
    assert (props["ActiveState"], props["ExecMainStatus"], props["NRestarts"]) == (
        "failed", "2", "0"), props  # fmt: skip
    for done in ("refused", "outage", "budget", "misconfigured"):
        assert batch(bed, {**job_vars(done), "sparkops_batch_action": "remove"}).rc == 0
