"""The job folder keeps its pipeline (issue 40 item 3, "from the job folder alone"): the first
run saves the YAML and every file it names, byte for byte, 0600, with their sha256 in
pipeline/index.json (jobdir/pipeline_copy.py); `report --methods` writes from that copy with the
originals gone; a resume never rewrites it and says when it no longer matches; `batch verify`
catches an edited saved prompt, and an edited index through the seal; `--restart` sets the copy
aside. Real `batch run`s against the fault server; the copy's own rules as direct calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from sparkops import cli
from sparkops.jobdir.folder import Manifest, load_manifest, lock_job_dir, prepare_dir
from sparkops.jobdir.pipeline_copy import PipelineSource, keep_pipeline
from sparkops.methods.saved import load_saved, pipeline_source
from sparkops.pipeline import constrain
from sparkops.pipeline.spec import load_pipeline
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import write_records
from tests.plugins.job_dir import methods_table as table

NO_COLUMNS = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
TRIAGE = """\
name: triage
model: tiny
steps:
  - name: screen
    system: prompts/screen.txt
    user: "Note: {text}"
    max_tokens: 4
    temperature: 0
    parse: {choices: ["yes", "no"], default: unclear}
    next: {"yes": confirm, "no": stop, unclear: stop}
  - name: confirm
    system: ../shared/confirm.txt
    user: "Confirm: {text}"
    max_tokens: 3
    temperature: 0.3
    parse: {choices: ["yes", "no"], default: unclear}
"""
# a byte-order mark and CRLF line ends: the copy keeps the bytes, not the text the kit reads
SCREEN = b"\xef\xbb\xbfIs this note about a stroke?\r\nAnswer yes or no.\r\n"
CONFIRM = b"Confirm the stroke.\n"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def triage_job(tmp_path: Path) -> dict[str, Path]:
    """The pipeline in pipes/ (a prompt inside its folder, one in ../shared), 12 records."""
    pipes, shared = tmp_path / "pipes", tmp_path / "shared"
    (pipes / "prompts").mkdir(parents=True)
    shared.mkdir()
    (pipes / "prompts" / "screen.txt").write_bytes(SCREEN)
    (shared / "confirm.txt").write_bytes(CONFIRM)
    (pipes / "triage.yaml").write_text(TRIAGE)
    write_records(tmp_path / "in.jsonl", 12)
    return {
        "pipeline": pipes / "triage.yaml",
        "input": tmp_path / "in.jsonl",
        "out": tmp_path / "job",
    }


def run(job: dict[str, Path], url: str, *extra: str):
    done = sparkops(*batch_run(job, url, extra=extra), limit=90)
    assert done.returncode == 0, done
    return done


def command(capsys, *args: str) -> tuple[int, str, str]:
    """`sparkops *args` in this process (cheaper than a subprocess for a reader): its exit
    status, stdout and stderr."""
    capsys.readouterr()
    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def saved_files(out: Path) -> list[Path]:
    return sorted(p for p in (out / "pipeline").rglob("*") if p.is_file())


def test_a_job_keeps_its_pipeline_and_its_methods_need_nothing_else(fault_server, tmp_path, capsys):
    job = triage_job(tmp_path)
    done = run(job, fault_server.url)
    assert "warning" not in done.stderr, done.stderr
    out = job["out"]
    copy = out / "pipeline"
    # byte for byte: the YAML under its own name, a prompt at its path, one from outside
    assert (copy / "copy" / "triage.yaml").read_bytes() == TRIAGE.encode()
    assert (copy / "copy" / "prompts" / "screen.txt").read_bytes() == SCREEN
    index = json.loads((copy / "index.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert index["fingerprint"] == manifest["pipeline_fingerprint"] and index["run"] == 1
    assert index["pipeline"] == {
        "named": "triage.yaml",
        "path": "pipeline/copy/triage.yaml",
        "sha256": sha256(TRIAGE.encode()),
        "bytes": len(TRIAGE.encode()),
        "uses": [],
    }
    screen, confirm = index["files"]
    assert screen == {
        "named": "prompts/screen.txt",
        "path": "pipeline/copy/prompts/screen.txt",
        "sha256": sha256(SCREEN),
        "bytes": len(SCREEN),
        "uses": ["screen: system prompt"],
    }
    assert confirm["named"] == "../shared/confirm.txt" and confirm["sha256"] == sha256(CONFIRM)
    assert confirm["path"].startswith("pipeline/elsewhere/")  # never outside the job folder
    assert (out / confirm["path"]).read_bytes() == CONFIRM
    # owner-only: every file 0600, every folder 0700; nothing half built left behind
    for path in saved_files(out):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for folder in [copy, *(p for p in copy.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert not list(out.glob(".pipeline-copy-*"))
    # the originals gone: methods.md from the job folder alone, no --pipeline
    shutil.rmtree(tmp_path / "pipes")
    shutil.rmtree(tmp_path / "shared")
    status, said, err = command(capsys, "report", str(out), "--methods")
    assert (status, said, err) == (0, f"{out / 'methods.md'}\n", "")
    rows = table((out / "methods.md").read_text())
    source = f"pipeline/copy/triage.yaml (fingerprint {manifest['pipeline_fingerprint']} = "
    source += "manifest.json)"
    text = SCREEN.decode("utf-8-sig").replace("\r\n", "\n")  # what the model was sent
    assert rows["Step screen: prompts"] == (
        f"system prompt file pipeline/copy/prompts/screen.txt, sha256 {sha256(SCREEN)} "
        f"({len(text)} characters); user template sha256 {sha256(b'Note: {text}')}, filled "
        "with the record's text",
        source,
    )
    assert rows["Step confirm: prompts"][0].startswith(
        f"system prompt file {confirm['path']}, sha256 {sha256(CONFIRM)} ("
    )
    defaults = "other sampling parameters the server's defaults"
    assert rows["Step screen: sampling"] == (f"temperature 0, max_tokens 4; {defaults}", source)
    assert rows["Step confirm: sampling"] == (f"temperature 0.3, max_tokens 3; {defaults}", source)
    assert rows["Step screen: routing"][0] == "yes -> confirm, no -> stop, unclear -> stop"


def test_a_resume_keeps_the_copy_and_an_edited_copy_is_caught(fault_server, tmp_path, capsys):
    job = triage_job(tmp_path)
    run(job, fault_server.url)
    out = job["out"]
    kept = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in saved_files(out)}
    resumed = run(job, fault_server.url)  # a resume: the copy is checked, not written again
    assert "warning" not in resumed.stderr, resumed.stderr
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in saved_files(out)} == kept
    said = f"saved by run 1 ({len(SCREEN):,} bytes, sha256 {sha256(SCREEN)[:16]}, "
    said += "pipeline/index.json)"
    status, verified, _ = command(capsys, "batch", "verify", str(out))
    assert status == 0, verified
    assert f"  pipeline/copy/prompts/screen.txt: as it was {said}" in verified.splitlines()
    # the saved prompt edited by hand
    prompt = out / "pipeline" / "copy" / "prompts" / "screen.txt"
    edited = SCREEN + b"Say yes.\r\n"
    prompt.write_bytes(edited)
    status, verified, _ = command(capsys, "batch", "verify", str(out))
    assert status == 1, verified
    lines = verified.splitlines()
    assert lines[0] == f"{out}: does not verify: 1 edit(s) found"
    changed = (
        f"pipeline/copy/prompts/screen.txt: changed since it was {said}: sha256 "
        f"{sha256(edited)[:16]} now, {len(edited):,} bytes"
    )
    assert f"  {changed}" in lines
    # methods refuse it, naming the file and the fix; nothing written
    (out / "methods.md").unlink(missing_ok=True)
    status, said, err = command(capsys, "report", str(out), "--methods")
    assert status == 2 and said == "", err
    error = err.splitlines()[-1]
    assert error == (
        f"sparkops: error: {out / 'pipeline'} (the job's saved pipeline): {changed}; `sparkops "
        f"batch verify {out}` says what changed; pass --pipeline P.yaml (the pipeline file the "
        "job ran) to write the methods from it"
    )
    assert not (out / "methods.md").exists()
    # the job's own pipeline file still writes them (proven by the fingerprint)
    status, _, err = command(
        capsys, "report", str(out), "--methods", "--pipeline", str(job["pipeline"])
    )
    assert status == 0, err
    # an index edited to match is caught by the seal
    other = tmp_path / "other"
    shutil.copytree(out, other)
    index = json.loads((other / "pipeline" / "index.json").read_text())
    index["files"][0]["sha256"], index["files"][0]["bytes"] = sha256(edited), len(edited)
    (other / "pipeline" / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    status, verified, _ = command(capsys, "batch", "verify", str(other))
    assert status == 1, verified
    assert "  pipeline/index.json: changed since run 2 ended, not by appending" in verified
    # a resume says so once and leaves the edited copy as it is
    resumed = run(job, fault_server.url)
    warnings = [x for x in resumed.stderr.splitlines() if "saved pipeline" in x]
    assert warnings == [
        f"sparkops: warning: {out / 'pipeline'} (the job's saved pipeline): {changed}; the copy "
        "is kept as it is (never rewritten): `sparkops report DIR --methods` will need "
        "--pipeline P.yaml"
    ]
    assert prompt.read_bytes() == edited
    # --restart sets the copy aside with the job's files (the next run saves it afresh)
    with lock_job_dir(out):
        prepare_dir(out, load_manifest(out), restart=True)
    (previous,) = [p for p in out.glob("previous-*") if (p / "pipeline").exists()]
    assert (previous / "pipeline" / "copy" / "prompts" / "screen.txt").read_bytes() == edited
    assert not (out / "pipeline").exists()


def test_a_folder_named_pipeline_that_is_not_the_copy_is_left_alone(tmp_path):
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "notes.txt").write_text("mine")
    stale = tmp_path / ".pipeline-copy-999"  # a run killed while it built its copy
    (stale / "copy").mkdir(parents=True)
    source = PipelineSource("p.yaml", b"name: p\n", ())
    said = keep_pipeline(tmp_path, source, "0123", 1)
    assert said == (
        f"{tmp_path / 'pipeline'} is there but holds no saved pipeline (no "
        "pipeline/index.json); left as it is, so this job keeps no copy of its pipeline: move "
        "it away and run the job again to save one"
    )
    assert sorted(p.name for p in (tmp_path / "pipeline").iterdir()) == ["notes.txt"]
    assert not stale.exists()
    # once saved, a copy is never rewritten, whatever a later run reads
    shutil.rmtree(tmp_path / "pipeline")
    assert keep_pipeline(tmp_path, source, "0123", 1) is None
    assert keep_pipeline(tmp_path, PipelineSource("p.yaml", b"other\n", ()), "4567", 2) is None
    assert (tmp_path / "pipeline" / "copy" / "p.yaml").read_bytes() == b"name: p\n"
    assert json.loads((tmp_path / "pipeline" / "index.json").read_text())["run"] == 1


def test_a_schema_file_and_an_absolute_prompt_path_load_back_from_the_copy(tmp_path):
    pipes, elsewhere = tmp_path / "pipes", tmp_path / "elsewhere"
    pipes.mkdir()
    elsewhere.mkdir()
    schema = {
        "type": "object",
        "properties": {"severity": {"type": "string", "enum": ["minor", "major"]}},
        "required": ["severity"],
    }
    (pipes / "detail.json").write_text(json.dumps(schema))
    (elsewhere / "screen").write_bytes(b"Screen the note.\n")  # no extension: still a path
    (pipes / "p.yaml").write_text(
        "name: facts\nmodel: tiny\nsteps:\n"
        f"  - name: screen\n    system: {elsewhere / 'screen'}\n    user: 'Note: {{text}}'\n"
        "    parse: {choices: ['yes', 'no'], default: unclear}\n"
        "    next: {'yes': detail, 'no': stop, unclear: stop}\n"
        "  - name: detail\n    user: 'Detail: {text}'\n"
        "    extract: {schema: detail.json, route: severity}\n"
    )
    spec = load_pipeline(pipes / "p.yaml")
    job = tmp_path / "job"
    job.mkdir()
    source = pipeline_source(pipes / "p.yaml")
    assert keep_pipeline(job, source, spec.fingerprint(), 1) is None
    shutil.rmtree(pipes)
    shutil.rmtree(elsewhere)
    manifest = Manifest(
        pipeline_fingerprint=spec.fingerprint(),
        input_fingerprint="0" * 16,
        input="in.jsonl",
        kind="jsonl",
        id_field="id",
        total=1,
        constraints={k: str(v) for k, v in constrain.modes(spec).items()},
    )
    loaded = load_saved(job, manifest)
    assert loaded is not None and loaded.spec == spec
    assert loaded.files["detail: JSON Schema"] == (
        "pipeline/copy/detail.json",
        sha256(json.dumps(schema).encode()),
    )
    shown, digest = loaded.files["screen: system prompt"]
    assert shown == "pipeline/elsewhere/1-screen" and digest == sha256(b"Screen the note.\n")
