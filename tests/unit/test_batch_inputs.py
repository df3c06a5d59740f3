"""Inputs and job files that must never lose, repeat or crash (issue 11, items 2, 3, 6, 8).

Real files, real locks held by real processes, /dev/full for a real full device; a
monkeypatched os.write only where the kernel cannot be made to answer a short write.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from sparkops.batch.endpoints import normalise_base
from sparkops.batch.limits import RESERVE, ensure_open_files, fd_shortfall
from sparkops.batch.records import InputProblem, Record, detect_kind, read_records, scan_input
from sparkops.errors import JobStopped, UserError
from sparkops.jobdir import durable
from sparkops.jobdir.durable import dumps_line, iter_json_lines, write_all, write_json_atomic
from sparkops.jobdir.folder import (
    MANIFEST,
    RESULTS,
    load_manifest,
    lock_holder,
    lock_job_dir,
    prepare_dir,
)
from sparkops.jobdir.journal import Journal
from sparkops.pipeline.spec import load_pipeline, looks_like_path
from tests.plugins.job_dir import manifest

BOM = "\ufeff"


# ---- item 3: every readable id counts in the duplicate scan --------------------------------
def test_csv_row_with_an_extra_value_counts_its_id_as_a_duplicate(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text("id,text\na,one\nb,two,EXTRA\nc,three\nb,real b\n")
    scan = scan_input(p, "csv", "id")
    assert scan.total == 4
    assert scan.duplicates == [("b", 5)]


def test_invalid_openai_line_counts_its_custom_id_as_a_duplicate(tmp_path):
    p = tmp_path / "batch.jsonl"
    ok = {"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}
    bad = {**ok, "method": "GET"}  # fails validation, but its custom_id is readable
    p.write_text("\n".join(json.dumps(o) for o in (bad, {**ok, "custom_id": "y"}, ok)) + "\n")
    items = list(read_records(p, "openai"))
    assert isinstance(items[0], InputProblem) and items[0].id == "x"
    assert scan_input(p, "openai", "id").duplicates == [("x", 3)]


def test_lines_without_a_readable_id_are_not_duplicates_of_each_other(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('not json\nnot json either\n{"text": "no id"}\n{"id": "a"}\n')
    scan = scan_input(p, "jsonl", "id")
    assert scan.total == 4 and scan.duplicates == []


# ---- item 8: a byte-order mark is not part of record 1 -------------------------------------
def test_bom_jsonl_record_one_is_a_record(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text(BOM + '{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n', encoding="utf-8")
    assert detect_kind(p) == "jsonl"
    items = list(read_records(p, "jsonl"))
    assert items == [
        Record("a", 1, {"id": "a", "text": "x"}),
        Record("b", 2, {"id": "b", "text": "y"}),
    ]


def test_bom_openai_batch_file_is_detected_as_one(tmp_path):
    p = tmp_path / "batch.jsonl"
    line = {"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions", "body": {}}
    p.write_text(BOM + json.dumps(line) + "\n", encoding="utf-8")
    assert detect_kind(p) == "openai"
    (item,) = read_records(p, "openai")
    assert isinstance(item, Record) and item.id == "c1"


def test_bom_csv_finds_its_id_column(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text(BOM + "id,text\nk1,hello\n", encoding="utf-8")
    (item,) = read_records(p, "csv", "id")
    assert item == Record("k1", 2, {"id": "k1", "text": "hello"})


# ---- item 6: lone surrogates, short writes, a full device ---------------------------------
def test_lone_surrogate_id_is_journalled_as_valid_utf8_json_and_found_on_resume(tmp_path):
    rid = json.loads('"a\\ud800b"')  # what json.loads gives for an escaped lone surrogate
    j = Journal(tmp_path, "id", fsync_interval=0)
    j.open()
    j.append({"id": rid, "status": "done", "text": "Grüße"})
    j.append({"id": "plain", "status": "done", "text": "Grüße"})
    j.close()
    raw = (tmp_path / RESULTS).read_bytes()
    raw.decode("utf-8")  # strict: the whole file is valid UTF-8
    assert "Grüße".encode() in raw  # other lines stay readable (not \\u-escaped)
    j2 = Journal(tmp_path, "id")
    j2.open()
    assert j2.done == {rid, "plain"}
    j2.close()
    assert dumps_line({"id": rid}) == b'{"id":"a\\ud800b"}\n'


def test_short_writes_are_finished_into_whole_lines(tmp_path, monkeypatch):
    real_write = os.write
    calls = []

    def short_write(fd, data):
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))  # the kernel may write less than asked

    monkeypatch.setattr(durable.os, "write", short_write)
    j = Journal(tmp_path, "id", fsync_interval=0)
    j.open()
    for i in range(5):
        j.append({"id": f"r{i}", "status": "done", "final": "yes" * i})
    j.close()
    monkeypatch.undo()
    assert [o["id"] for o in iter_json_lines(tmp_path / RESULTS)] == [f"r{i}" for i in range(5)]
    assert len(calls) > 5


def test_a_write_failing_part_way_leaves_whole_lines_and_stops_the_job(tmp_path, monkeypatch):
    j = Journal(tmp_path, "id", fsync_interval=0)
    j.open()
    j.append({"id": "a", "status": "done"})
    real_write = os.write
    state = {"n": 0}

    def fill_up(fd, data):
        state["n"] += 1
        if state["n"] == 1:
            return real_write(fd, bytes(data[:5]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(durable.os, "write", fill_up)
    with pytest.raises(JobStopped, match=r"No space left on device; free space .* resume"):
        j.append({"id": "b", "status": "done"})
    monkeypatch.undo()
    j.close()
    assert (tmp_path / RESULTS).read_bytes() == b'{"id":"a","status":"done"}\n'


def test_a_real_full_device_is_a_job_stop_not_an_oserror(tmp_path):
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(JobStopped, match=r"cannot write .*results\.jsonl: No space left"):
            write_all(fd, b"x" * 100, tmp_path / RESULTS)
    finally:
        os.close(fd)


def test_atomic_json_write_keeps_the_old_file_when_the_disk_is_full(tmp_path, monkeypatch):
    path = tmp_path / "prefix.json"
    write_json_atomic(path, {"v": 1})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(durable.os, "write", full)
    with pytest.raises(JobStopped):
        write_json_atomic(path, {"v": 2})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prefix.json"]  # no temp left


# ---- item 6: empty or truncated manifest, restarts within one second ----------------------
@pytest.mark.parametrize("content", [b"", b'{"pipeline_fingerprint": "p1", "inp'])
def test_unreadable_manifest_without_results_is_regenerated(tmp_path, content):
    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    (job / MANIFEST).write_bytes(content)
    prepare_dir(job, manifest(), restart=False)
    assert load_manifest(job).to_json() == manifest().to_json()


def test_unreadable_manifest_with_results_names_both_fixes(tmp_path):
    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    (job / RESULTS).write_text('{"id":"a","status":"done"}\n')
    (job / MANIFEST).write_bytes(b"")
    with pytest.raises(UserError, match=r"empty or corrupt.*--restart.*new --out DIR"):
        prepare_dir(job, manifest(), restart=False)
    with pytest.raises(UserError, match=r"manifest.json is empty or corrupt, so nothing shows"):
        load_manifest(job)
    (job / MANIFEST).unlink()  # no manifest at all proves no more (issue 37 item 5)
    with pytest.raises(UserError, match=r"holds results of a job but no manifest.json"):
        prepare_dir(job, manifest(), restart=False)
    assert (job / RESULTS).read_text().count("\n") == 1


def test_unreadable_manifest_with_restart_is_moved_aside(tmp_path):
    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    (job / RESULTS).write_text('{"id":"a","status":"done"}\n')
    (job / MANIFEST).write_bytes(b"{")
    assert prepare_dir(job, manifest(), restart=True) is False
    (backup,) = job.glob("previous-*")
    assert (backup / MANIFEST).read_bytes() == b"{" and (backup / RESULTS).exists()


def test_three_restarts_within_one_second_keep_three_backups(tmp_path, monkeypatch):
    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    # the clock is held on one second, so the three restarts share a stem whatever the load
    real_strftime, second = time.strftime, time.localtime()
    monkeypatch.setattr(time, "strftime", lambda fmt, _t=None: real_strftime(fmt, second))
    for i in range(3):
        (job / RESULTS).write_text(json.dumps({"id": f"run{i}", "status": "done"}) + "\n")
        prepare_dir(job, manifest(), restart=True)
    backups = sorted(job.glob("previous-*"))
    assert len(backups) == 3
    kept = sorted(json.loads((b / RESULTS).read_text())["id"] for b in backups)
    assert kept == ["run0", "run1", "run2"]


# ---- item 8: an existing folder that is not a job ------------------------------------------
def test_non_empty_folder_that_is_not_a_job_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "thesis"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    (folder / "chapter1.docx").write_text("mine")
    with pytest.raises(UserError, match=r"not a sparkops job and not empty.*chapter1.docx"):
        prepare_dir(folder, manifest(), restart=True)
    with pytest.raises(UserError, match="new or empty --out"):
        lock_job_dir(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["chapter1.docx"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755


def test_empty_existing_folder_is_used_with_its_mode_left_alone(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    os.chmod(folder, 0o750)
    prepare_dir(folder, manifest(), restart=False)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750
    assert stat.S_IMODE((folder / MANIFEST).stat().st_mode) == 0o600


def test_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "out"
    f.write_text("x")
    with pytest.raises(UserError, match="is a file, not a folder"):
        lock_job_dir(f)


# ---- item 2: one run per job directory -----------------------------------------------------
def test_second_lock_is_refused_naming_the_holder_and_free_after_release(tmp_path):
    job = tmp_path / "job"
    with lock_job_dir(job):
        assert (job / "lock").read_text().strip() == str(os.getpid())
        with pytest.raises(
            UserError, match=rf"in use by another sparkops batch run \(pid {os.getpid()}\)"
        ):
            lock_job_dir(job)
        assert lock_holder(job) == os.getpid()
    assert lock_holder(job) is None
    with lock_job_dir(job) as again:
        assert again.held
    assert stat.S_IMODE(job.stat().st_mode) == 0o700


def test_lock_of_a_process_killed_with_sigkill_is_taken_over(tmp_path):
    job = tmp_path / "job"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from pathlib import Path
                from sparkops.jobdir.folder import lock_holder, lock_job_dir
                lock = lock_job_dir(Path({str(job)!r}))
                print("locked", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UserError, match=rf"pid {holder.pid}\)"):
            lock_job_dir(job)
        assert lock_holder(job) == holder.pid
    finally:
        holder.kill()
        holder.wait(timeout=10)
    with lock_job_dir(job):
        assert (job / "lock").read_text().strip() == str(os.getpid())


# ---- item 6: open-files budget -------------------------------------------------------------
def test_fd_shortfall_counts_sockets_endpoints_and_reserve():
    assert fd_shortfall(1000, 1, 20, 1024) == 1000 + 1 + 20 + RESERVE
    assert fd_shortfall(900, 1, 20, 1024) is None


def _limits_child(soft: int, hard: int, concurrency: int) -> subprocess.CompletedProcess:
    code = (
        "import resource\n"
        "from sparkops.batch.limits import ensure_open_files\n"
        "from sparkops.errors import UserError\n"
        "try:\n"
        f"    print('ok', ensure_open_files({concurrency}, 1))\n"
        "except UserError as err:\n"
        "    print('refused', err)\n"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_soft_open_files_limit_is_raised_to_the_hard_one():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= 2048, "the test machine's hard limit is too low for this test"
    out = _limits_child(256, 2048, 1000)
    assert out.stdout.strip() == "ok 2048", out.stderr


def test_concurrency_that_cannot_fit_the_hard_limit_is_refused_with_the_fix():
    out = _limits_child(256, 256, 1000)
    assert out.stdout.startswith("refused --concurrency 1000 needs about"), out.stderr
    fits = int(out.stdout.split("pass --concurrency ")[1].split()[0])
    assert 100 < fits < 256 - RESERVE
    assert _limits_child(256, 256, fits).stdout.startswith("ok 256")


def test_this_process_keeps_a_workable_limit():
    assert ensure_open_files(10, 1) >= 10 + RESERVE


# ---- item 8: endpoints and system prompt files ---------------------------------------------
@pytest.mark.parametrize(
    ("given", "fix"),
    [("localhost:8000", "http://localhost:8000"), ("spark-1:8000/v1", "http://spark-1:8000/v1")],
)
def test_endpoint_without_scheme_names_the_fix(given, fix):
    with pytest.raises(UserError, match=f"write it as {fix}$"):
        normalise_base(given)


def test_endpoint_forms():
    assert normalise_base(" http://h:8000/v1/ ") == "http://h:8000"
    assert normalise_base("https://h/") == "https://h"
    for bad in ("ftp://h:21", "http://", ""):
        with pytest.raises(UserError, match="not an http:// or https:// URL"):
            normalise_base(bad)
    # a route copied from a curl line: named, with the base URL to give instead (and a
    # password in the URL stays out of the message)
    for given, base in (
        ("http://h:8000/v1/chat/completions", "http://h:8000"),
        ("http://u:pw@h:8000/v1/models/", "http://***@h:8000"),
    ):
        with pytest.raises(UserError, match=r"names an API route \(/v1/\w+") as err:
            normalise_base(given)
        assert str(err.value).endswith(f"give the server's base URL, {base}")
        assert "pw" not in str(err.value)


@pytest.mark.parametrize(
    ("value", "is_path"),
    [
        ("prompts/screen", True),
        ("screen_prompt", True),
        ("screen.prompt", True),
        ("my prompts/screen.txt", True),
        ("Answer yes or no.", False),
        ("Answer yes/no.", False),
        ("Classify.", False),
        ("line one\nline two", False),
    ],
)
def test_which_system_values_name_files(value, is_path):
    assert looks_like_path(value) is is_path


PIPE = """\
name: t
model: m
steps:
  - name: a
    system: {system}
    user: "{{text}}"
    parse: {{choices: [yes, no]}}
"""


@pytest.mark.parametrize("system", ["prompts/screen", "screen_prompt", "'notes/screen v2.md'"])
def test_missing_system_file_without_txt_is_an_error_not_prompt_text(tmp_path, system):
    p = tmp_path / "p.yaml"
    p.write_text(PIPE.format(system=system))
    with pytest.raises(UserError, match=r"names a prompt file, but .* was not found"):
        load_pipeline(p)


def test_system_file_without_extension_is_read_and_inline_sentences_stay_text(tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "screen").write_text(BOM + "Screen it.\n", encoding="utf-8")
    p = tmp_path / "p.yaml"
    p.write_text(PIPE.format(system="prompts/screen"))
    assert load_pipeline(p).first.system == "Screen it.\n"
    p.write_text(PIPE.format(system="'Answer yes/no.'"))
    assert load_pipeline(p).first.system == "Answer yes/no."
    p.write_text(PIPE.format(system="prompts"))
    with pytest.raises(UserError, match="is a folder, not a file"):
        load_pipeline(p)


def test_damaged_results_lines_are_skipped_and_their_records_resent(tmp_path):
    (tmp_path / RESULTS).write_bytes(
        b'{"id":"a","status":"done"}\n'
        b'{"id":"b","sta\xff\xfe"}\n'  # bad bytes
        b"[1, 2]\n"  # JSON, but not a results line
        b'{"id":"c","status":"done"}\n'
    )
    assert [o["id"] for o in iter_json_lines(tmp_path / RESULTS)] == ["a", "c"]
    j = Journal(tmp_path, "id")
    j.open()
    assert j.done == {"a", "c"}
    j.close()


# ---- issue 21 items 6-8: strict decoding, a bounded read, keys no id can equal ---------------
def test_a_cp1252_byte_is_refused_naming_line_and_offset_and_read_with_its_encoding(tmp_path):
    p = tmp_path / "in.csv"
    p.write_bytes("id,text\nr1,ok\ncafé,crème\n".encode("cp1252"))
    with pytest.raises(UserError, match=r"line 3, byte offset 17 \(0xe9\).*--encoding cp1252"):
        scan_input(p, "csv", "id")
    items = list(read_records(p, "csv", "id", encoding="cp1252"))
    assert [i.id for i in items] == ["r1", "café"] and items[1].fields["text"] == "crème"


def test_bytes_that_are_not_utf16_name_their_line_and_offset(tmp_path):
    """Issue 34 item 14: --encoding utf-16 on other bytes was "internal error (UnicodeError)"
    (Python's UTF-16 codec raises a plain UnicodeError without a byte-order mark)."""
    plain = tmp_path / "utf8.jsonl"
    plain.write_bytes(b'{"id": "r1", "text": "a"}\n')
    with pytest.raises(UserError, match=r"line 1, byte offset 0: UTF-16 stream does not start "
                       r"with BOM.*--encoding utf-16-le or utf-16-be"):  # fmt: skip
        scan_input(plain, "jsonl", "id", "utf-16")
    two = '{"id": "r1"}\n{"id": "r2"}\n'.encode("utf-16")  # BOM + 2 lines of 13 characters
    surrogate = tmp_path / "surrogate.jsonl"
    surrogate.write_bytes(two + b"\x00\xd8A\x00\n\x00")  # a lone high surrogate on line 3
    with pytest.raises(UserError, match=r"line 3, byte offset 54 \(0x00\) has no character"):
        scan_input(surrogate, "jsonl", "id", "utf-16")
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(two + b"{")  # half a character at the end
    with pytest.raises(UserError, match=r"line 3, byte offset 54: the file ends inside a char"):
        scan_input(odd, "jsonl", "id", "utf-16")
    good = tmp_path / "ok.jsonl"
    good.write_bytes(two)
    assert [i.id for i in read_records(good, "jsonl", "id", "utf-16")] == ["r1", "r2"]


def test_lone_cr_line_endings_still_split_records(tmp_path):
    p = tmp_path / "mac.csv"
    p.write_bytes(b"id,text\rr1,a\rr2,b\r")
    assert [i.id for i in read_records(p, "csv", "id")] == ["r1", "r2"]


def test_the_read_stops_at_the_scanned_size_and_drops_half_a_line(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": "a"}\n{"id": "b"}\n')
    scan = scan_input(p, "jsonl", "id")
    with p.open("a") as fh:
        fh.write('{"id": "c"}\n')
    assert [i.id for i in read_records(p, "jsonl", "id", limit=scan.stamp.size)] == ["a", "b"]
    assert "grew from 24 to 36 bytes" in (scan.stamp.change(p) or "")
    p.write_text('{"id": "a"}\n{"id"')  # truncated mid-line
    assert [i.id for i in read_records(p, "jsonl", "id", limit=scan.stamp.size)] == ["a"]
    assert "shrank from 24 to 17 bytes" in (scan.stamp.change(p) or "")


def test_an_id_spelt_like_a_line_key_is_not_that_line(tmp_path):
    from sparkops.jobdir import lines

    bad = {"id": None, "status": "error", "error": "line 2: not valid JSON", "line": 2}
    odd = {"id": "\x00line:2", "status": "done", "final": "yes", "line": 3}
    assert lines.outcome(bad).key == lines.LineKey(2) != lines.outcome(odd).key == "\x00line:2"


def test_a_manifest_field_of_the_wrong_type_is_one_line(tmp_path):
    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    (job / MANIFEST).write_text(json.dumps({**manifest().to_json(), "total": "3"}))
    with pytest.raises(UserError, match="has a bad field 'total'"):
        load_manifest(job)


def test_drop_errors_keeps_the_old_file_and_leaves_each_record_once(tmp_path):
    from sparkops.jobdir.folder import drop_errors

    job = tmp_path / "job"
    prepare_dir(job, manifest(), restart=False)
    j = Journal(job, "id", fsync_interval=0)
    j.open()
    for rid, st in (("a", "done"), ("b", "error"), ("c", "done")):
        j.append({"id": rid, "status": st, "final": "yes" if st == "done" else None, "line": 1})
    j.close()
    assert drop_errors(job) == 1
    assert [r["id"] for r in iter_json_lines(job / RESULTS)] == ["a", "c"]
    (backup,) = job.glob("previous-*/results.jsonl")
    assert [r["id"] for r in iter_json_lines(backup)] == ["a", "b", "c"]
    assert drop_errors(job) == 0


def test_status_of_a_folder_that_is_not_a_job_says_what_to_give(tmp_path):
    """Issue 31 item 14: a missing folder is named as missing (not "no manifest.json"), and
    the parent of job folders lists them, so `batch status ~/jobs` finds `~/jobs/run-1`."""
    with pytest.raises(UserError, match=r"absent does not exist; give the --out folder"):
        load_manifest(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty is not a sparkops job directory \(no manifest"):
        load_manifest(tmp_path / "empty")
    for name in ("run-b", "run-a", "notes"):
        (tmp_path / "jobs" / name).mkdir(parents=True)
    for name in ("run-b", "run-a"):
        prepare_dir(tmp_path / "jobs" / name, manifest(), restart=False)
    with pytest.raises(UserError) as err:
        load_manifest(tmp_path / "jobs")
    jobs = tmp_path / "jobs"
    assert str(err.value) == (
        f"{jobs} is not a sparkops job directory but holds 2: {jobs / 'run-a'}, "
        f"{jobs / 'run-b'}; give one of them"
    )
