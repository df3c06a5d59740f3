"""The job directory and the input never lose, repeat or crash (issue 11, items 2, 3, 6, 8).

Each case runs `sparkops batch run` (a subprocess, as a user would) against the fault-
injecting OpenAI/vLLM test server, and checks the exit status, one `sparkops:` line on
stderr, no traceback, every record exactly once, and a bounded time. The full disk is a
real one: a 64 KiB tmpfs mounted in a private mount namespace (unshare), grown afterwards
to show the job resumes. The hanging-preflight cases run in-process, with the preflight
budget shortened, so that they take seconds rather than the production 30 s.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from sparkops.batch import job as job_mod
from sparkops.batch.job import JobConfig, run_job
from sparkops.errors import UserError
from tests.plugins import cli
from tests.plugins.cli import batch_run, start
from tests.plugins.fault_server import (
    FaultServer,
    hang,
    ok,
    openai_lines,
    raw,
    slow,
    status,
    write_records,
)
from tests.plugins.mounts import in_mount_namespace, outcome, step

pytestmark = pytest.mark.integration

ONE_STEP = """\
name: one
model: tiny
steps:
  - name: screen
    system: {system}
    user: "Note: {{text}}\\nAnswer:"
    max_tokens: 4
    parse: {{choices: ["yes", "no"], default: unclear}}
"""
COMPLETIONS = "/v1/chat/completions"


@pytest.fixture
def job(tmp_path: Path) -> dict[str, Path]:
    pipeline = tmp_path / "pipe.yaml"
    pipeline.write_text(ONE_STEP.format(system="'Answer yes or no.'"))
    return {"pipeline": pipeline, "input": tmp_path / "in.jsonl", "out": tmp_path / "job"}


# Every CLI call here must finish within 30 s and print no traceback or asyncio noise.
sparkops = partial(cli.sparkops, limit=30.0)


def run(job, server: FaultServer, *extra, limit: float = 30.0, **kw) -> cli.Finished:
    return sparkops(*batch_run(job, server.openai_url, extra=extra), limit=limit, **kw)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.startswith("sparkops:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def results(out: Path, key: str = "id") -> Counter:
    path = out / "results.jsonl"
    if not path.exists():
        return Counter()
    return Counter(json.loads(x)[key] for x in path.read_bytes().decode("utf-8").splitlines())


# ---- item 2: one run per job directory -----------------------------------------------------
def test_second_run_is_refused_naming_the_pid_and_kill_9_leaves_a_lock_the_next_run_takes(
    job, fault_server
):
    ids = write_records(job["input"], 40)
    fault_server.first(4, slow(0.1))
    fault_server.default = hang()  # the first run stays busy until it is killed
    fault_server.check_action = ok()  # the pre-job check request is answered
    first = start(
        *batch_run(job, fault_server.openai_url, extra=("--concurrency", "4")),
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while sum(results(job["out"]).values()) < 4:
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.1)
        second = run(job, fault_server, "--concurrency", "4")
        assert second.returncode == 2
        line = one_error_line(second)
        assert f"in use by another sparkops batch run (pid {first.pid})" in line
        shown = sparkops("batch", "status", str(job["out"]))
        assert shown.returncode == 0 and f"running (pid {first.pid})" in shown.stdout
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    assert first.returncode == -signal.SIGKILL
    assert (job["out"] / "lock").read_text().strip() == str(first.pid)  # left behind
    shown = sparkops("batch", "status", str(job["out"]), "--json")
    assert json.loads(shown.stdout)["running_pid"] is None  # a stale pid is not "running"
    fault_server.default = slow(0.01)
    third = run(job, fault_server, "--concurrency", "4")
    assert third.returncode == 0, third.stderr
    assert results(job["out"]) == Counter(ids)  # every record exactly once


# ---- item 3: a malformed line carrying a real record's id ----------------------------------
def test_csv_row_with_an_extra_value_and_a_real_id_is_a_duplicate_before_any_request(
    job, fault_server
):
    job["input"] = job["input"].with_suffix(".csv")
    job["input"].write_text(
        "id,text\nr1,[id:r1] one\nr2,[id:r2] two,EXTRA\nr3,[id:r3] three\nr2,[id:r2] real\n"
    )
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "1 duplicate id(s)" in one_error_line(proc) and "'r2' (line 5)" in proc.stderr
    assert fault_server.paths[COMPLETIONS] == 0 and not job["out"].exists()


# ---- item 6: a full disk -------------------------------------------------------------------
def test_full_disk_stops_with_one_line_and_the_job_resumes_once_there_is_room(
    job, fault_server, tmp_path
):
    ids = write_records(job["input"], 300)
    # free text (a step held to its choices could not write it)
    free = ONE_STEP.format(system="'Answer yes or no.'").replace(
        "steps:", "constrain: false\nsteps:"
    )
    job["pipeline"].write_text(free)
    fault_server.content = "no " + "x" * 400  # ~0.5 KiB per results line: 64 KiB fills
    disk, copy = tmp_path / "disk", tmp_path / "copy"
    disk.mkdir()
    run_cmd = batch_run(job, fault_server.openai_url, out=disk / "job")
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {disk} || exit 99\n"
        + step(tmp_path, "first", run_cmd)
        + f"cp -a {disk}/job {tmp_path}/full\n"
        + f"mount -o remount,size=8m {disk}\n"
        + step(tmp_path, "second", run_cmd)
        + f"cp -a {disk}/job {copy}\n"
    )
    in_mount_namespace(script, timeout=120)
    first = outcome(tmp_path, "first")
    assert first.returncode == 1, first.stderr
    line = one_error_line(first)
    assert "No space left on device" in line and "run the same command again" in line
    stopped = results(tmp_path / "full")
    assert 10 < sum(stopped.values()) < 300 and max(stopped.values()) == 1
    (tmp_path / "full" / "results.jsonl").read_bytes().decode("utf-8")  # whole lines only
    second = outcome(tmp_path, "second")
    assert second.returncode == 0, second.stderr
    assert results(copy) == Counter(ids)


# ---- item 6: a lone surrogate in an id -----------------------------------------------------
def test_lone_surrogate_id_finishes_and_is_not_sent_again(job, fault_server):
    ids = write_records(job["input"], 5)
    with job["input"].open("a") as fh:  # "\ud800" is valid JSON but not encodable as UTF-8
        fh.write('{"id": "odd\\ud800", "text": "[id:odd] note"}\n')
    proc = run(job, fault_server)
    assert proc.returncode == 0, proc.stderr
    got = results(job["out"])
    assert got == Counter([*ids, "odd\ud800"])
    sent = sum(fault_server.requests.values())  # record calls, the check aside
    again = run(job, fault_server)
    assert again.returncode == 0, again.stderr
    assert sum(fault_server.requests.values()) == sent  # recognised as finished
    assert results(job["out"]) == got


# ---- item 6: empty or truncated manifest.json / prefix.json --------------------------------
def test_corrupt_manifest_is_one_line_with_the_fix_in_run_status_and_report(job, fault_server):
    ids = write_records(job["input"], 8)
    assert run(job, fault_server).returncode == 0
    manifest = job["out"] / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:20])  # truncated, as a crash left it
    for args in (("batch", "status", str(job["out"])), ("report", str(job["out"]))):
        proc = sparkops(*args)
        assert proc.returncode == 2
        assert "manifest.json is empty or corrupt" in one_error_line(proc)
    sent = sum(fault_server.requests.values())
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "nothing shows" in one_error_line(proc) and "--restart" in proc.stderr
    manifest.unlink()  # no manifest proves no more (issue 37 item 5): the same refusal
    for args in (("batch", "status", str(job["out"])), ("report", str(job["out"]))):
        proc = sparkops(*args)
        assert proc.returncode == 2
        assert "holds results of a job but no manifest.json" in one_error_line(proc)
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "holds results of a job but no manifest.json" in one_error_line(proc)
    assert sum(fault_server.requests.values()) == sent and results(job["out"]) == Counter(ids)
    proc = run(job, fault_server, "--restart")  # the fix the line names: old files kept
    assert proc.returncode == 0, proc.stderr
    assert sum(fault_server.requests.values()) == 2 * sent and results(job["out"]) == Counter(ids)
    assert json.loads(manifest.read_text())["total"] == 8
    (backup,) = job["out"].glob("previous-*")
    assert results(backup) == Counter(ids)
    (job["out"] / "prefix.json").write_bytes(b"")  # derived data: the report goes on
    proc = sparkops("report", str(job["out"]))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o600
    assert not list(job["out"].glob(".*.tmp"))


# ---- item 6: open files --------------------------------------------------------------------
def _nofile(soft: int, hard: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def test_concurrency_above_the_open_files_limit_is_refused_before_any_request(job, fault_server):
    write_records(job["input"], 5)
    proc = run(job, fault_server, "--concurrency", "1000", preexec_fn=_nofile(256, 256))
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert "--concurrency 1000 needs about" in line and "ulimit" in line
    assert fault_server.paths == Counter() and not job["out"].exists()


def test_a_low_soft_limit_is_raised_so_the_concurrency_fits(job, fault_server):
    ids = write_records(job["input"], 300)
    fault_server.default = slow(1.0)
    proc = run(job, fault_server, "--concurrency", "300", preexec_fn=_nofile(256, 4096))
    assert proc.returncode == 0, proc.stderr
    assert fault_server.max_in_flight > 256  # more sockets than the soft limit allowed
    assert results(job["out"]) == Counter(ids)


# ---- item 6: /tokenize and /v1/models that hang or answer another shape --------------------
def test_tokenize_of_another_shape_degrades_the_ceiling_with_a_note(job, fault_server):
    ids = write_records(job["input"], 6)
    fault_server.override("/tokenize", raw(b'{"tokens": "not a list"}'))
    proc = run(job, fault_server)
    assert proc.returncode == 0, proc.stderr
    assert "no hit-rate ceiling" in one_error_line(proc)
    prefix = json.loads((job["out"] / "prefix.json").read_text())
    assert prefix["steps"] == {} and "/tokenize answered" in prefix["note"]
    assert results(job["out"]) == Counter(ids)


@pytest.mark.parametrize(
    "body", [b'[{"id": "tiny"}]', b'{"data": {"id": "tiny"}}', b"<html>proxy</html>"]
)
def test_models_of_another_shape_is_one_line_before_any_request(job, fault_server, body):
    write_records(job["input"], 3)
    fault_server.override("/v1/models", raw(body))
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "does not answer like vLLM or LiteLLM" in one_error_line(proc)
    assert fault_server.paths[COMPLETIONS] == 0


def test_models_refused_with_401_names_the_api_key_option(job, fault_server):
    write_records(job["input"], 3)
    fault_server.override("/v1/models", status(401))
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "/v1/models answered HTTP 401; check --api-key-env" in one_error_line(proc)
    assert fault_server.paths[COMPLETIONS] == 0


def _in_process(job, server, monkeypatch, capsys) -> tuple[float, str]:
    monkeypatch.setattr(job_mod, "PREFLIGHT_TIMEOUT_S", 2.0)
    cfg = JobConfig(
        input=job["input"],
        out=job["out"],
        endpoints=[server.openai_url],
        pipeline=job["pipeline"],
        progress=False,
        sample_interval=0.5,
    )
    t0 = time.monotonic()
    try:
        run_job(cfg)
    finally:
        elapsed = time.monotonic() - t0
    return elapsed, capsys.readouterr().err


def test_hanging_tokenize_is_bounded_and_the_job_runs_without_a_ceiling(
    job, fault_server, monkeypatch, capsys
):
    ids = write_records(job["input"], 6)
    fault_server.override("/tokenize", hang())
    _, err = _in_process(job, fault_server, monkeypatch, capsys)  # returns: the hang never ends
    assert "did not answer within 2 s" in err and "no hit-rate ceiling" in err
    assert results(job["out"]) == Counter(ids)


def test_hanging_models_is_one_user_error_within_the_budget(job, fault_server, monkeypatch, capsys):
    write_records(job["input"], 3)
    fault_server.override("/v1/models", hang())
    with pytest.raises(UserError, match=r"/v1/models did not answer within 2 s"):
        _in_process(job, fault_server, monkeypatch, capsys)  # raises: the hang never ends
    assert fault_server.paths[COMPLETIONS] == 0


# ---- item 8: BOMs, a scheme-less endpoint, a user's folder, a missing system file ----------
def test_bom_inputs_finish_every_record(job, fault_server, tmp_path):
    ids = write_records(job["input"], 5)
    job["input"].write_bytes(b"\xef\xbb\xbf" + job["input"].read_bytes())
    proc = run(job, fault_server)
    assert proc.returncode == 0, proc.stderr
    assert results(job["out"]) == Counter(ids)
    batch = tmp_path / "batch.jsonl"
    custom = openai_lines(batch, 4)
    batch.write_bytes(b"\xef\xbb\xbf" + batch.read_bytes())
    proc = sparkops(
        "batch", "run", "--input", str(batch), "--out", str(tmp_path / "ob"),
        "--endpoint", fault_server.openai_url, "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert results(tmp_path / "ob", "custom_id") == Counter(custom)


def test_endpoint_without_http_names_the_fix_and_sends_nothing(job, fault_server):
    write_records(job["input"], 3)
    bare = fault_server.openai_url.removeprefix("http://")
    proc = sparkops(*batch_run(job, bare))
    assert proc.returncode == 2
    assert one_error_line(proc).endswith(f"write it as http://{bare}")
    assert fault_server.paths == Counter() and not job["out"].exists()


def test_non_empty_folder_that_is_not_a_job_is_refused_and_untouched(job, fault_server):
    write_records(job["input"], 3)
    folder = job["out"]
    folder.mkdir()
    os.chmod(folder, 0o755)
    (folder / "notes.txt").write_text("mine")
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "not a sparkops job and not empty (it holds notes.txt)" in one_error_line(proc)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert fault_server.paths[COMPLETIONS] == 0


def test_missing_system_file_without_txt_is_refused_not_sent_as_the_prompt(job, fault_server):
    write_records(job["input"], 3)
    job["pipeline"].write_text(ONE_STEP.format(system="prompts/screen"))
    proc = run(job, fault_server)
    assert proc.returncode == 2
    assert "names a prompt file, but" in one_error_line(proc) and "prompts/screen" in proc.stderr
    assert fault_server.paths == Counter()
