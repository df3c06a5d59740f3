"""The input is what the job says it is (issue 21 items 4, 6, 7, 8, 13, 14, OpenAI files).

Each case runs `sparkops batch run` (or `status` / `report`, `pipeline check`) as a
subprocess with a hostile input against the fault server, and checks the exit status, one
`sparkops:` line on stderr naming the problem and the fix, no traceback, every record at most
once with its true status, and (for refusals) that no completion was requested.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from tests.plugins import cli
from tests.plugins.cli import SPARKOPS, batch_run, finish, start
from tests.plugins.fault_server import FaultServer, openai_lines, slow, status, write_records
from tests.plugins.mounts import in_mount_namespace, outcome, step

pytestmark = pytest.mark.integration

COMPLETIONS = "/v1/chat/completions"
sparkops = partial(cli.sparkops, limit=60.0)


def run(job, server: FaultServer, *extra: str) -> cli.Finished:
    return sparkops(*batch_run(job, server.openai_url, extra=extra))


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.startswith("sparkops:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def results(out: Path, key: str = "id") -> list[dict]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_bytes().decode("utf-8").splitlines()]


def refused(proc: cli.Finished, server: FaultServer, *words: str) -> str:
    """Exit 2, one line holding `words`, no completion sent."""
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    for word in words:
        assert word in line, line
    assert server.paths[COMPLETIONS] == 0
    return line


# ---- item 6: the input is fixed for a run ----------------------------------------------------
def _start_slow_job(job, server: FaultServer, n: int) -> tuple[subprocess.Popen, float]:
    write_records(job["input"], n)
    server.default = slow(0.3)
    proc = start(*batch_run(job, server.openai_url, extra=("--concurrency", "2")))
    started = time.monotonic()
    deadline = started + 60
    while len(results(job["out"])) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
        time.sleep(0.05)
    return proc, started


def test_lines_appended_mid_run_stop_the_job_and_a_resume_is_refused_with_the_fix(
    job, fault_server
):
    proc, started = _start_slow_job(job, fault_server, 60)
    with job["input"].open("a") as fh:  # a duplicate of an unfinished id, and a new one
        fh.write('{"id": "r60", "text": "[id:r60] again"}\n{"id": "r61", "text": "[id:r61] x"}\n')
    code, _, err = finish(proc, started, 60)
    assert code == 1, err
    line = error_line(subprocess.CompletedProcess([], code, "", err))
    assert "grew from" in line and "(lines appended)" in line and "--restart" in line
    ids = Counter(r["id"] for r in results(job["out"]))
    assert max(ids.values()) == 1 and "r61" not in ids  # never a record twice, none unread
    assert all(r["status"] == "done" for r in results(job["out"]))
    again = run(job, fault_server)  # the resume reads the input again: its duplicate is named
    assert again.returncode == 2 and "'r60' (line 61)" in error_line(again)
    kept = job["input"].read_text().splitlines()
    job["input"].write_text("\n".join(kept[:60] + kept[61:]) + "\n")  # r61 added, no duplicate
    again = run(job, fault_server)
    assert again.returncode == 2
    assert "different input" in error_line(again) and "--restart" in again.stderr
    restarted = run(job, fault_server, "--restart")
    assert restarted.returncode == 0, restarted.stderr
    assert Counter(r["id"] for r in results(job["out"])) == Counter(f"r{i}" for i in range(1, 62))


def test_an_input_emptied_mid_run_stops_the_job_without_a_record_error(job, fault_server):
    proc, started = _start_slow_job(job, fault_server, 60)
    job["input"].write_bytes(b"")
    code, _, err = finish(proc, started, 60)
    assert code == 1, err
    line = error_line(subprocess.CompletedProcess([], code, "", err))
    assert "shrank from" in line and "to 0 bytes (truncated or emptied)" in line
    got = results(job["out"])
    assert got and all(r["status"] == "done" for r in got)  # no error for vanished records
    assert max(Counter(r["id"] for r in got).values()) == 1


# ---- item 7: an input that is not UTF-8 ------------------------------------------------------
def test_cp1252_csv_is_refused_naming_the_byte_and_runs_with_encoding_cp1252(job, fault_server):
    job["input"] = job["input"].with_suffix(".csv")
    job["input"].write_bytes("id,text\nr1,[id:r1] ok\ncafé,[id:café] crème\n".encode("cp1252"))
    proc = run(job, fault_server)
    line = refused(proc, fault_server, "is not UTF-8: line 3", "(0xe9)", "--encoding cp1252")
    assert "\ufffd" not in proc.stderr and not job["out"].exists()
    sent: list[str] = []

    def answer(key: str, body: dict) -> str:
        sent.append(json.dumps(body["messages"], ensure_ascii=False))
        return "yes"

    fault_server.content = answer
    ok = run(job, fault_server, "--encoding", "cp1252")
    assert ok.returncode == 0, ok.stderr
    assert sorted(r["id"] for r in results(job["out"])) == ["café", "r1"]
    assert any("crème" in text for text in sent) and not any("\ufffd" in t for t in sent)
    assert line.count("sparkops:") == 1


# ---- item 8: an id spelt like the old internal key of an unreadable line -------------------
def test_an_id_equal_to_an_internal_line_key_is_its_own_record(job, fault_server):
    job["input"].write_text(
        '{"id": "r1", "text": "[id:r1] a"}\n'
        "not json\n"
        '{"id": "\\u0000line:2", "text": "[id:odd] b"}\n'
        '{"id": "r4", "text": "[id:r4] c"}\n'
    )
    proc = run(job, fault_server)
    assert proc.returncode == 3, proc.stderr  # the unreadable line is a record error
    got = results(job["out"])
    assert sorted((r["id"] or "", r["status"]) for r in got) == [
        ("", "error"),
        ("\x00line:2", "done"),
        ("r1", "done"),
        ("r4", "done"),
    ]
    sent = sum(fault_server.requests.values())  # record calls (the check request aside)
    again = run(job, fault_server)
    assert again.returncode == 3 and sum(fault_server.requests.values()) == sent
    assert len(results(job["out"])) == 4


# ---- item 4: a user template that names no record field; an empty prompt file -----------------
@pytest.mark.parametrize("user", ["prompts/user.txt", "Classify this note."])
def test_a_user_template_without_a_field_is_refused_by_check_and_run(job, fault_server, user):
    write_records(job["input"], 3)
    job["pipeline"].write_text(
        "name: one\nmodel: tiny\nsteps:\n  - name: screen\n"
        f"    user: {user}\n    parse: {{choices: [yes, no]}}\n"
    )
    proc = run(job, fault_server)
    refused(proc, fault_server, "names no record field", "same prompt")
    check = sparkops("pipeline", "check", str(job["pipeline"]), "--endpoint", fault_server.url)
    assert check.returncode == 2 and "names no record field" in error_line(check)
    if user.endswith(".txt"):
        assert "not a file name" in proc.stderr


def test_an_empty_system_prompt_file_is_refused(job, fault_server):
    write_records(job["input"], 3)
    (job["pipeline"].parent / "system.txt").write_text("  \n")
    job["pipeline"].write_text(
        "name: one\nmodel: tiny\nsteps:\n  - name: screen\n    system: system.txt\n"
        '    user: "Note: {text}"\n    parse: {choices: [yes, no]}\n'
    )
    refused(run(job, fault_server), fault_server, "system.txt is empty")


# ---- item 14: messages that lead somewhere ----------------------------------------------------
def test_a_prompt_field_the_records_lack_is_a_config_error_before_any_request(job, fault_server):
    write_records(job["input"], 30)
    job["pipeline"].write_text(job["pipeline"].read_text().replace("{text}", "{note}"))
    refused(run(job, fault_server), fault_server, "['note']", "line 1 has: id, text")


def test_records_without_the_id_field_name_the_id_field_option(job, fault_server):
    job["input"].write_text(
        "".join(json.dumps({"key": f"k{i}", "text": f"[id:k{i}] x"}) + "\n" for i in range(6))
    )
    refused(run(job, fault_server), fault_server, "6 of 6 records", "--id-field NAME", "key")
    half = [{"id": f"r{i}"} if i % 2 else {"text": "x"} for i in range(6)]
    job["input"].write_text("".join(json.dumps({**r, "text": "[id:r] t"}) + "\n" for r in half))
    refused(run(job, fault_server), fault_server, "3 of 6 records", "--id-field")
    wrong = run(job, fault_server, "--id-field", "key")  # this file has no 'key' at all
    refused(wrong, fault_server, "6 of 6 records", "no 'key'")


@pytest.mark.parametrize(
    ("name", "body", "words"),
    [
        ("in.csv", b"", ("is empty (no header row)",)),
        ("in.csv", b"id,text\n", ("holds no records",)),
        ("in.jsonl", b"", ("holds no records",)),
    ],
)
def test_an_empty_input_is_refused_saying_so(job, fault_server, name, body, words):
    job["input"] = job["input"].with_name(name)
    job["input"].write_bytes(body)
    refused(run(job, fault_server), fault_server, *words)
    assert not job["out"].exists()


# ---- OpenAI batch files ---------------------------------------------------------------------
def test_openai_line_without_custom_id_or_unreadable_is_refused_naming_the_line(
    job, fault_server, tmp_path
):
    batch = tmp_path / "batch.jsonl"
    openai_lines(batch, 4)
    lines = batch.read_text().splitlines()
    second = json.loads(lines[1])
    del second["custom_id"]
    lines[1] = json.dumps(second)
    lines[3] = "{not json"
    batch.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    argv = (*SPARKOPS, "batch", "run", "--input", str(batch), "--out", str(out))
    proc = sparkops(*argv, "--endpoint", fault_server.openai_url, "--no-progress")
    refused(proc, fault_server, "no custom_id", "line 2, 4")
    assert not out.exists()


def test_pipeline_with_an_openai_batch_file_is_an_error(job, fault_server, tmp_path):
    batch = tmp_path / "batch.jsonl"
    openai_lines(batch, 3)
    job["input"] = batch
    refused(run(job, fault_server), fault_server, "OpenAI batch file", "drop --pipeline")


# ---- item 1 (the input's half): --retry-errors; status tells errors apart ----------------------
def test_retry_errors_sends_the_record_errors_again_and_status_tells_them_apart(
    job, fault_server, fault_server_factory
):
    ids = write_records(job["input"], 12)
    for rid in ("r3", "r7"):
        fault_server.script(rid, *[status(400, message="prompt too long")] * 20)
    first = run(job, fault_server)
    assert first.returncode == 3, first.stderr
    shown = sparkops("batch", "status", str(job["out"]))
    assert shown.returncode == 0
    assert "10 done, 2 record errors, 0 remaining of 12" in shown.stdout
    assert "--retry-errors" in shown.stdout
    st = json.loads(sparkops("batch", "status", str(job["out"]), "--json").stdout)
    assert (st["record_errors"], st["other_errors"], st["remaining"]) == (2, 0, 0)
    plain = run(job, fault_server)  # a plain resume keeps the errors: they are finished
    assert plain.returncode == 3 and "0 calls" in plain.stdout
    fixed = fault_server_factory()  # the cause is fixed: a server that answers them
    again = run(job, fixed, "--retry-errors")
    assert again.returncode == 0, again.stderr
    assert "sending 2 record(s) that ended in error again" in again.stderr
    assert sum(fixed.requests.values()) == 2
    got = results(job["out"])
    assert Counter(r["id"] for r in got) == Counter(ids)  # each record once, all done
    assert all(r["status"] == "done" for r in got)
    (backup,) = job["out"].glob("previous-*/results.jsonl")
    assert sum(json.loads(x)["status"] == "error" for x in backup.read_text().splitlines()) == 2


# ---- item 13: one-line errors, never a traceback ----------------------------------------------
def test_status_and_report_on_a_bad_manifest_are_one_line(job, fault_server):
    write_records(job["input"], 4)
    assert run(job, fault_server).returncode == 0
    manifest = job["out"] / "manifest.json"
    good = json.loads(manifest.read_text())
    for broken in ({**good, "total": "4"}, {**good, "kind": 3}):
        manifest.write_text(json.dumps(broken))
        for args in (("batch", "status", str(job["out"])), ("report", str(job["out"]))):
            proc = sparkops(*args)
            assert proc.returncode == 2
            assert "has a bad field" in error_line(proc)
    manifest.unlink()
    manifest.mkdir()
    for args in (("batch", "status", str(job["out"])), ("report", str(job["out"]))):
        proc = sparkops(*args)
        assert proc.returncode == 2 and "is not a file" in error_line(proc)


def test_out_a_dangling_symlink_is_one_line(job, fault_server, tmp_path):
    write_records(job["input"], 2)
    job["out"].symlink_to(tmp_path / "nowhere")
    refused(run(job, fault_server), fault_server, "symbolic link", "does not exist")


def test_read_only_job_folder_and_full_disk_report_are_one_line(job, fault_server, tmp_path):
    write_records(job["input"], 4)
    assert run(job, fault_server).returncode == 0
    disk = tmp_path / "disk"
    disk.mkdir()
    rerun = batch_run(job, fault_server.openai_url, out=disk / "job")
    script = (
        f"mount -t tmpfs -o size=8m tmpfs {disk} || exit 99\n"
        f"cp -a {job['out']} {disk}/job\n"
        f"mount -o remount,ro {disk}\n"
        + step(tmp_path, "ro_run", rerun)
        + step(tmp_path, "ro_report", [*SPARKOPS, "report", "--json", str(disk / "job")])
        + step(tmp_path, "ro_status", [*SPARKOPS, "batch", "status", str(disk / "job")])
        + f"mount -o remount,rw,size=%d {disk}\n"
        + f"dd if=/dev/zero of={disk}/fill bs=4k 2>/dev/null; rm -f {disk}/job/report.*\n"
        + step(tmp_path, "full_report", [*SPARKOPS, "report", str(disk / "job")])
    )
    used = sum(p.stat().st_size for p in job["out"].iterdir() if p.is_file())
    in_mount_namespace(script % (used + 64 * 1024))
    ro_run = outcome(tmp_path, "ro_run")
    assert ro_run.returncode == 2 and "read-only" in error_line(ro_run)
    assert "internal error" not in ro_run.stderr
    ro_report = outcome(tmp_path, "ro_report")
    assert ro_report.returncode == 2 and "read-only" in error_line(ro_report)
    assert outcome(tmp_path, "ro_status").returncode == 0  # reading needs no writing
    full = outcome(tmp_path, "full_report")
    assert full.returncode == 2, full.stderr
    assert "No space left on device" in error_line(full) and "free space" in full.stderr
    assert os.path.exists(job["out"] / "results.jsonl")
