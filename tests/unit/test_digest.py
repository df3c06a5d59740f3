"""Results that show if they were edited (issue 40 item 4): each run's end line seals the job
folder's files (jobdir/digest.py); `sparkops batch verify DIR` checks them, file by file, and
`report` and `compare` warn when a folder does not verify. Real `batch run`s against the fault
server: a resume, a kill, `--retry-errors` are no edits; a changed decision, a removed line,
an edit a later resume would hide, a hand-appended line and an edited seal are."""

from __future__ import annotations

import hashlib
import json
import signal
import time
from pathlib import Path

from sparkops.jobdir import digest
from tests.plugins.cli import batch_run, finish, sparkops, start, wait_for
from tests.plugins.fault_server import hang, status, write_records


def ends(out: Path) -> list[dict]:
    """The end lines of runs.jsonl."""
    rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("event") == "end"]


def results(out: Path) -> list[str]:
    return (out / "results.jsonl").read_text().splitlines(keepends=True)


def flip(row: str) -> str:
    """The results line with its decision changed (no <-> yes), as a hand edit would."""
    if '"final":"no"' in row:
        return row.replace('"final":"no"', '"final":"yes"')
    assert '"final":"yes"' in row, row
    return row.replace('"final":"yes"', '"final":"no"')


def verify(out: Path, *extra: str):
    return sparkops("batch", "verify", str(out), *extra, timeout=120)


def held_run(job, server, keep: int):
    """A `batch run` (concurrency 1) holding its record r<keep+1> unanswered once `keep`
    records are in results.jsonl: the test stops it there."""
    server.script(f"r{keep + 1}", hang())
    argv = batch_run(job, server.url, extra=("--concurrency", "1"))
    proc = start(*argv)
    started = time.monotonic()
    wait_for(lambda: len(results_if_any(job["out"])) >= keep, 60, f"{keep} results")
    return proc, started


def results_if_any(out: Path) -> list[str]:
    return results(out) if (out / "results.jsonl").exists() else []


def test_a_finished_job_verifies_and_an_edit_is_caught_file_by_file(job, fault_server, tmp_path):
    write_records(job["input"], 40)
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 0
    out = job["out"]
    (seal,) = [end["digests"] for end in ends(out)]
    body = (out / "results.jsonl").read_bytes()
    sealed = seal["files"]["results.jsonl"]
    assert sealed["sha256"] == hashlib.sha256(body).hexdigest() and sealed["lines"] == 40
    assert sealed["bytes"] == len(body) and sealed["since"] == "new"
    assert seal["previous"] is None and seal["algorithm"] == "sha256"
    assert set(seal["files"]) >= {"results.jsonl", "manifest.json", "serving.jsonl", "runs.jsonl"}
    done = verify(out)
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert lines[0] == f"{out}: verified against run 1's seal (run 1 sealed)"
    assert (
        f"  results.jsonl: unchanged since run 1 ended (40 line(s), {len(body):,} bytes)" in lines
    )
    assert "  runs.jsonl: sealed up to run 1 ended; its end line follow" in lines
    # one decision changed (line 5) and one line removed (line 30)
    rows = results(out)
    rows[4] = flip(rows[4])
    del rows[29]
    (out / "results.jsonl").write_text("".join(rows))
    done = verify(out)
    assert done.returncode == 1, done
    size = (out / "results.jsonl").stat().st_size
    assert done.stdout.splitlines()[0] == f"{out}: does not verify: 1 edit(s) found"
    assert (
        "  results.jsonl: changed since run 1 ended, not by appending: line 5 differs first; "
        f"39 lines now, 40 then ({size:,} bytes now, {len(body):,} then)"
    ) in done.stdout.splitlines()
    assert json.loads(verify(out, "--json").stdout)["verified"] is False
    # report and compare say so on stderr, and go on
    warning = (
        f"sparkops: warning: {out} does not verify: results.jsonl: changed since run 1 ended, "
        "not by appending: line 5 differs first"
    )
    report = sparkops("report", str(out), timeout=120)
    assert report.returncode == 0 and report.stderr.startswith(warning), report
    assert f"`sparkops batch verify {out}` says what changed" in report.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.jsonl").write_bytes(body)
    compared = sparkops("compare", str(out), str(other), "--json", timeout=120)
    assert compared.returncode == 0, compared
    said = warning.removeprefix("sparkops: warning: ")
    assert any(w.startswith(said) for w in json.loads(compared.stdout)["warnings"])
    # a removed file is an edit too
    (out / "serving.jsonl").unlink()
    done = verify(out)
    assert (
        done.returncode == 1
        and "  serving.jsonl: removed since run 1 ended (it held" in done.stdout
    )


def test_a_resume_and_a_killed_run_are_no_edit(job, fault_server):
    write_records(job["input"], 30)
    proc, started = held_run(job, fault_server, keep=10)
    proc.send_signal(signal.SIGINT)
    code, _, _ = finish(proc, started, 60)
    assert code == 130
    out = job["out"]
    assert verify(out).returncode == 0
    # run 2 is killed (no end line, no seal) after more records: appended by a run, not an edit
    fault_server.release()  # run 1's held call
    fault_server.hold_again()  # run 2 is held at r21 whatever the machine's pace
    proc, started = held_run(job, fault_server, keep=20)
    proc.kill()
    proc.communicate()
    done = verify(out)
    assert done.returncode == 0, done
    assert "line(s) appended since run 1 ended (by a later run: not an edit)" in done.stdout
    # run 3 finishes the job: its seal says results.jsonl was appended to since run 1's
    fault_server.release()
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 0
    first, third = (end["digests"] for end in ends(out))
    assert third["files"]["results.jsonl"]["since"] == "appended"
    assert third["previous_run"] == 1 and third["previous"] == digest.seal_digest(first)
    done = verify(out)
    assert done.returncode == 0, done
    assert done.stdout.splitlines()[0] == f"{out}: verified against run 3's seal (runs 1, 3 sealed)"
    assert len(results(out)) == 30


def test_an_edit_between_runs_is_not_hidden_by_the_resume(job, fault_server):
    write_records(job["input"], 30)
    proc, started = held_run(job, fault_server, keep=10)
    proc.send_signal(signal.SIGINT)
    assert finish(proc, started, 60)[0] == 130
    out = job["out"]
    rows = results(out)
    rows[2] = flip(rows[2])
    (out / "results.jsonl").write_text("".join(rows))
    fault_server.release()
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 0
    assert ends(out)[-1]["digests"]["files"]["results.jsonl"]["since"] == "changed"
    done = verify(out)
    assert done.returncode == 1, done
    assert (
        "  results.jsonl: changed between run 1's end and run 2's end, not by appending (seen "
        "and recorded by run 2's seal)"
    ) in done.stdout.splitlines()
    assert "  results.jsonl: unchanged since run 2 ended" in done.stdout  # as run 2 left it


def test_retry_errors_is_the_kits_own_rewrite_not_an_edit(job, fault_server):
    write_records(job["input"], 12)
    fault_server.script("r4", status(400, message="bad record"))
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 3
    out = job["out"]
    retry = sparkops(*batch_run(job, fault_server.url, extra=("--retry-errors",)), limit=90)
    assert retry.returncode == 0, retry
    assert ends(out)[-1]["digests"]["files"]["results.jsonl"]["since"] == "retried"
    assert verify(out).returncode == 0


def test_lines_appended_by_hand_and_an_edited_seal_are_caught(job, fault_server):
    write_records(job["input"], 8)
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 0
    out = job["out"]
    extra = results(out)[0].replace('"r1"', '"r99"')
    with (out / "results.jsonl").open("a") as handle:  # no run started since: not the kit's
        handle.write(extra)
    done = verify(out)
    assert done.returncode == 1, done
    assert (
        "  results.jsonl: 1 line(s) appended since run 1 ended, but no run started since: not "
        "the kit's"
    ) in done.stdout.splitlines()
    rows = results(out)
    (out / "results.jsonl").write_text("".join(rows[:-1]))
    assert verify(out).returncode == 0
    # a second run (nothing left to do) seals again, linked to the first seal
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 0
    assert verify(out).returncode == 0
    runs = (out / "runs.jsonl").read_text().splitlines(keepends=True)
    first_end = next(i for i, r in enumerate(runs) if '"event":"end"' in r)
    runs[first_end] = runs[first_end].replace('"lines":8', '"lines":9', 1)
    (out / "runs.jsonl").write_text("".join(runs))
    done = verify(out)
    assert done.returncode == 1, done
    said = done.stdout.splitlines()
    assert (
        "  runs.jsonl: run 1's seal is not the one run 2's seal links to (an end line of "
        "runs.jsonl was edited)"
    ) in said
    assert any(
        x.startswith("  runs.jsonl: changed since run 2 ended, not by appending") for x in said
    )


def test_verify_refuses_what_it_cannot_check(tmp_path, job, fault_server):
    done = verify(tmp_path / "missing")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"sparkops: error: {tmp_path / 'missing'} does not exist")
    write_records(job["input"], 3)
    assert sparkops(*batch_run(job, fault_server.url), limit=90).returncode == 0
    out = job["out"]
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    for row in runs:
        row.pop("digests", None)  # as a kit from before seals wrote it
    (out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    done = verify(out)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.strip() == (
        f"sparkops: error: {out}: nothing to verify: no run of this job sealed its files (it "
        "was run by a kit from before seals); a resume seals the files as they are then, and "
        "cannot vouch for them before"
    )
    # report says nothing about seals it does not have
    report = sparkops("report", str(out), timeout=120)
    assert report.returncode == 0 and "verify" not in report.stderr, report
