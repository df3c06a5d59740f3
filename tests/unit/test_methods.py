"""`sparkops report DIR --methods` and `compare --methods` (issue 40 item 3): methods.md from
the job folder alone, each value traced to its file, in TRIPOD-LLM's order, marked places for
what the kit cannot know; the pipeline from the copy the job folder keeps (or --pipeline for a
folder from before the copy), only when proven the job's. Real jobs against the fault server: a
two-step pipeline with a system prompt file and a stack record, constrained and not.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkops import cli
from sparkops.jobdir.pipeline_copy import COPY_DIR
from sparkops.methods.document import HEADER
from tests.plugins.cli import batch_run, sparkops
from tests.plugins.fault_server import FaultServer, status, write_records
from tests.plugins.job_dir import methods_table as table

NO_COLUMNS = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
SECTIONS = [
    "Paragraph",
    "Data",
    "Outcome and reference standard",
    "Large language model",
    "Prompting",
    "Handling of records",
    "Analysis and uncertainty",
    "Computing environment",
    "Integrity of the results",
    "Availability",
]
TWO_STEPS = """\
name: triage
model: tiny
{constrain}steps:
  - name: screen
    system: prompts/screen.txt
    user: "Note: {{text}}"
    max_tokens: 4
    temperature: 0
    parse: {{choices: ["yes", "no"], default: unclear}}
    next: {{"yes": confirm, "no": stop, unclear: confirm}}
  - name: confirm
    user: "Confirm: {{text}}"
    max_tokens: 4
    temperature: 0.2
    parse: {{choices: ["yes", "no"], default: unclear}}
    next: {{"yes": stop, "no": stop, unclear: stop}}
"""
STACK = {
    "profile": "test-profile",
    "model": "/models/tiny",
    "image": "vllm/vllm-openai:v0.11.0",
    "base_digest": "sha256:abc123",
    "command": [
        "vllm", "serve", "/models/tiny", "--quantization", "fp8", "--kv-cache-dtype", "fp8",
        "--max-num-seqs", "64", "--enable-prefix-caching", "--api-key", "sk-NOT-FOR-PAPERS",
    ],
}  # fmt: skip


def write_pipeline(folder: Path, name: str, constrain: bool = True, prompt: str = "") -> Path:
    (folder / "prompts").mkdir(exist_ok=True)
    (folder / "prompts" / "screen.txt").write_text(prompt or "Is this note about a stroke?\n")
    path = folder / name
    path.write_text(TWO_STEPS.format(constrain="" if constrain else "constrain: false\n"))
    return path


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Two finished jobs over one input: the pipeline constrained (one record error) and the
    same pipeline with constrain: false; gold labels for the records."""
    base = tmp_path_factory.mktemp("methods")
    write_records(base / "in.jsonl", 40)
    (base / "stack-record.json").write_text(json.dumps(STACK))
    rnd = random.Random(4)
    answers = {f"r{i}": rnd.choice(["yes", "no"]) for i in range(1, 41)}
    gold = base / "gold.csv"
    labels = [f"r{i},{rnd.choice(['yes', 'no'])}\n" for i in range(1, 41)]
    gold.write_text("id,label\n" + "".join(labels))
    server = FaultServer().start()
    try:
        server.content = lambda key, body: answers.get(key, "no")
        server.script("r7", status(400, message="too long"))
        out = {}
        for name, constrain in (("held", True), ("free", False)):
            job = {
                "pipeline": write_pipeline(base, f"{name}.yaml", constrain),
                "input": base / "in.jsonl",
                "out": base / name,
            }
            extra = ("--stack-record", str(base / "stack-record.json"))
            done = sparkops(*batch_run(job, server.url, extra=extra), limit=120)
            assert done.returncode in (0, 3), done
            out[name] = job
    finally:
        server.stop()
    return {**out, "base": base, "gold": gold}


def methods(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    """`sparkops report FOLDER --methods` in this process (a reader: no subprocess needed)."""
    argv = ["report", str(folder), "--methods", *extra]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def before_the_copy(folder: Path, target: Path) -> Path:
    """A copy of a job folder as a kit from before seals and the pipeline copy left it: no
    pipeline/, no digests in the end lines."""
    shutil.copytree(folder, target)
    shutil.rmtree(target / COPY_DIR)
    rows = [json.loads(x) for x in (target / "runs.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("digests", None)
    (target / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return target


def test_methods_md_holds_every_item_traced_to_its_file(jobs):
    held = jobs["held"]
    out = held["out"]
    done = methods(out)  # from the job folder alone: no --pipeline
    assert done.returncode == 0, done
    assert done.stdout.strip() == str(out / "methods.md")
    text = (out / "methods.md").read_text()
    assert text.splitlines()[0] == HEADER
    titles = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert titles == SECTIONS  # TRIPOD-LLM's order
    rows = table(text)
    manifest = json.loads((out / "manifest.json").read_text())
    start = json.loads((out / "serving.jsonl").read_text().splitlines()[0])
    identity = next(iter(start["endpoints"].values()))
    assert rows["Input"] == (
        f"in.jsonl (jsonl, record id field 'id'): 40 records; SHA-256 of its bytes begins "
        f"{manifest['input_fingerprint']}",
        "manifest.json",
    )
    assert rows["Model"][0].startswith(f"{identity['model']} (weights at {identity['root']}")
    assert rows["Inference engine"] == (
        f"vLLM {identity['version']}, image vllm/vllm-openai:v0.11.0 (base image digest "
        "sha256:abc123)",
        "serving.jsonl (the first run's start line)",
    )
    assert rows["Outcome"] == (
        "the pipeline's final decision per record: no, unclear, yes",
        "the pipeline (see Prompting)",
    )
    assert rows["Quantisation"][0] == "fp8"
    assert rows["KV-cache dtype"][0] == identity["cache.cache_dtype"]
    settings = rows["Serving settings (the server's command)"]
    assert settings == (
        "--quantization fp8; --kv-cache-dtype fp8; --max-num-seqs 64; --enable-prefix-caching on",
        "serving.jsonl (the stack record)",
    )
    assert "sk-NOT-FOR-PAPERS" not in text and "api-key" not in text
    # the pipeline the folder keeps, proven the job's by its fingerprint: each prompt's sha256
    # is its original file's, the YAML's too
    prompt = (held["pipeline"].parent / "prompts" / "screen.txt").read_bytes()
    fingerprint = manifest["pipeline_fingerprint"]
    source = f"pipeline/copy/held.yaml (fingerprint {fingerprint} = manifest.json)"
    assert rows["Pipeline"] == (
        "triage: 2 step(s), screen -> confirm (first step screen; served model name tiny); "
        f"the YAML's sha256 {sha256(held['pipeline'].read_bytes())}",
        source,
    )
    assert rows["Step screen: prompts"] == (
        f"system prompt file pipeline/copy/prompts/screen.txt, sha256 {sha256(prompt)} "
        f"({len(prompt)} characters); user template sha256 {sha256(b'Note: {text}')}, "
        "filled with the record's text",
        source,
    )
    assert rows["Step confirm: prompts"][0].startswith("no system prompt; user template")
    assert rows["Step screen: answer"] == ("one of yes, no (unreadable: unclear)", source)
    assert rows["Step screen: constraint"] == (
        "held on the server by structured outputs (choice)",
        "manifest.json (constraints)",
    )
    sampling = "other sampling parameters the server's defaults"
    assert rows["Step screen: sampling"] == (f"temperature 0, max_tokens 4; {sampling}", source)
    assert rows["Step confirm: sampling"] == (f"temperature 0.2, max_tokens 4; {sampling}", source)
    assert rows["Step screen: routing"][0] == "yes -> confirm, no -> stop, unclear -> confirm"
    # what happened to every record
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    decided = [r for r in results if r["status"] == "done"]
    assert rows["Records"][0] == (
        f"40 in the input: {len(decided)} decided, 1 ended in error, 0 errors that were not "
        "the record's, 0 not finished"
    )
    assert rows["Errors by cause"] == ("HTTP 400: too long: 1", "results.jsonl")
    assert rows["Runs"][0] == "1 run(s); each record has one results line, counted once"
    body = (out / "results.jsonl").read_bytes()
    assert rows["Results file"][0] == f"results.jsonl, SHA-256 {hashlib.sha256(body).hexdigest()}"
    assert rows["Seal"][0] == "verified against run 1's seal (`sparkops batch verify`)"
    # the places the kit cannot fill are marked, and say so; every other row names its file
    marked = ("Source of the records", "Dates of the records", "Population")
    marked += ("Reference standard", "Model revision or file digests", "Code and data")
    for item in marked:
        value, where = rows[item]
        assert value.startswith("**[TO COMPLETE: ") and where == "not in the job folder", item
    assert all(where for _, where in rows.values())
    assert "1 ended in error" in text.split("## Data")[0]  # the paragraph says it too


def test_a_folder_from_before_the_copy_asks_for_its_pipeline_in_one_line(jobs, tmp_path):
    old = before_the_copy(jobs["held"]["out"], tmp_path / "old")
    (old / "methods.md").unlink(missing_ok=True)
    done = methods(old)
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == (
        f"sparkops: error: {old} keeps no copy of its pipeline (a job run by a kit from before "
        "the copy, no pipeline/index.json); pass --pipeline P.yaml, the pipeline file the job "
        "ran, to write its methods\n"
    )
    assert not (old / "methods.md").exists()
    # --pipeline fills it, proven the job's by the fingerprint; the prompts' sha256 are the files'
    held = jobs["held"]["pipeline"]
    done = methods(old, "--pipeline", str(held))
    assert done.returncode == 0, done
    rows = table((old / "methods.md").read_text())
    prompt = (held.parent / "prompts" / "screen.txt").read_bytes()
    manifest = json.loads((old / "manifest.json").read_text())
    assert rows["Step screen: prompts"] == (
        f"system prompt file prompts/screen.txt, sha256 {sha256(prompt)} ({len(prompt)} "
        f"characters); user template sha256 {sha256(b'Note: {text}')}, filled with the "
        "record's text",
        f"held.yaml (fingerprint {manifest['pipeline_fingerprint']} = manifest.json)",
    )
    # compare reads such a folder too: the steps the results name, the rest a marked place
    target = tmp_path / "comparison.md"
    args = ["compare", str(old), str(jobs["free"]["out"]), "--methods", str(target)]
    assert sparkops(*args, env=NO_COLUMNS, timeout=120).returncode == 0
    rows = table(target.read_text())
    assert rows["Pipeline"] == (
        f"fingerprint {manifest['pipeline_fingerprint']}; steps seen in the results: screen, "
        "confirm",
        "manifest.json, results.jsonl",
    )
    assert rows["Prompts, answers, sampling, routing"][0].startswith("**[TO COMPLETE: ")


def test_a_pipeline_that_is_not_the_saved_one_is_refused_naming_both_sha256(jobs, tmp_path):
    out = jobs["held"]["out"]
    (out / "methods.md").unlink(missing_ok=True)
    fix = "drop --pipeline: the job folder keeps the pipeline the job ran"
    # the same YAML naming another prompt file
    other = write_pipeline(tmp_path, "held.yaml", prompt="Another question?\n")
    done = methods(out, "--pipeline", str(other))
    assert done.returncode == 2 and done.stdout == "", done
    saved = out / "pipeline" / "copy" / "prompts" / "screen.txt"
    theirs = sha256((tmp_path / "prompts" / "screen.txt").read_bytes())
    assert done.stderr == (
        f"sparkops: error: --pipeline {other} is not the pipeline {out} saved at its first run: "
        f"the file it names as 'prompts/screen.txt' has sha256 {theirs}, the saved {saved} "
        f"{sha256(saved.read_bytes())}; {fix}\n"
    )
    assert not (out / "methods.md").exists()
    # the same pipeline with constrain: false: another YAML
    free = jobs["free"]["pipeline"]
    done = methods(out, "--pipeline", str(free))
    assert done.returncode == 2, done
    yaml = out / "pipeline" / "copy" / "held.yaml"
    assert done.stderr == (
        f"sparkops: error: --pipeline {free} is not the pipeline {out} saved at its first run: it "
        f"has sha256 {sha256(free.read_bytes())}, the saved {yaml} {sha256(yaml.read_bytes())}; "
        f"{fix}\n"
    )
    # the job's own pipeline beside its copy: the same bytes, accepted
    assert methods(out, "--pipeline", str(jobs["held"]["pipeline"])).returncode == 0
    # --pipeline alone does nothing: refused
    alone = sparkops("report", str(out), "--pipeline", str(free), timeout=120)
    assert alone.returncode == 2
    assert alone.stderr.strip() == (
        "sparkops: error: --pipeline fills the methods section: pass --methods with it"
    )


def test_a_folder_from_before_the_copy_refuses_a_pipeline_that_is_not_the_jobs(jobs, tmp_path):
    old = before_the_copy(jobs["held"]["out"], tmp_path / "old")
    (old / "methods.md").unlink(missing_ok=True)
    other = write_pipeline(tmp_path, "other.yaml", prompt="Another question?\n")
    done = methods(old, "--pipeline", str(other))
    assert done.returncode == 2 and done.stdout == "", done
    manifest = json.loads((old / "manifest.json").read_text())
    line = done.stderr.strip()
    said = f"sparkops: error: {other} is not the pipeline {old} ran: its fingerprint is "
    assert line.startswith(said)
    assert f"the job's {manifest['pipeline_fingerprint']} (manifest.json)" in line
    assert not (old / "methods.md").exists()
    # the same pipeline with constrain: false (same fingerprint, another mode): refused too
    done = methods(old, "--pipeline", str(jobs["free"]["pipeline"]))
    assert done.returncode == 2, done
    assert "runs its steps constrained as screen: off, confirm: off, but" in done.stderr


def test_a_methods_md_the_kit_did_not_write_is_never_overwritten(jobs):
    out = jobs["free"]["out"]
    (out / "methods.md").write_text("# my own methods, filled in by hand\n")
    done = methods(out)
    assert done.returncode == 2, done
    assert "was not written by sparkops" in done.stderr
    assert (out / "methods.md").read_text() == "# my own methods, filled in by hand\n"
    (out / "methods.md").unlink()
    assert methods(out).returncode == 0
    assert methods(out).returncode == 0  # its own file: rewritten


def test_an_edited_folder_says_so_in_its_methods(jobs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(jobs["held"]["out"], copy)
    rows = (copy / "results.jsonl").read_text().splitlines(keepends=True)
    (copy / "results.jsonl").write_text("".join(rows[1:]))
    done = methods(copy)
    assert done.returncode == 0, done
    assert "verify" in done.stderr  # report's warning
    seal = table((copy / "methods.md").read_text())["Seal"][0]
    assert seal.startswith("DOES NOT VERIFY: results.jsonl: changed since run 1 ended")


def test_compare_methods_adds_the_comparison_with_intervals_and_verdicts(jobs, tmp_path):
    held, free = jobs["held"]["out"], jobs["free"]["out"]
    target = tmp_path / "comparison.md"
    args = ["compare", str(held), str(free), "--gold", str(jobs["gold"]), "--margin", "5%"]
    done = sparkops(*args, "--methods", str(target), "--json", env=NO_COLUMNS, timeout=120)
    assert done.returncode == 0, done
    out = json.loads(done.stdout)
    assert out["methods"] == str(target)
    text = target.read_text()
    titles = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert titles == [*SECTIONS[:6], "Run B (free): what differed from run A", *SECTIONS[6:]]
    rows = table(text)
    ivs = out["intervals"]
    agreement = ivs["agreement"]
    assert rows["Agreement"][0] == (
        f"{agreement['value']:.1%} ({100 * agreement['low']:.1f}-{100 * agreement['high']:.1f}) "
        "(95% Wilson)"
    )
    accuracy = ivs["runs"]["a"]["accuracy"]
    diff = ivs["differences_b_minus_a"]["accuracy"]
    assert rows["Accuracy"][0].startswith(
        f"A {accuracy['value']:.1%} ({100 * accuracy['low']:.1f}-{100 * accuracy['high']:.1f}),"
    )
    assert rows["Accuracy"][0].endswith(
        f"B - A {100 * diff['value']:+.1f} pts ({100 * diff['low']:+.1f} to "
        f"{100 * diff['high']:+.1f})"
    )
    gold_sha = hashlib.sha256(jobs["gold"].read_bytes()).hexdigest()[:16]
    assert rows["Gold labels"][1] == f"gold.csv (sha256 {gold_sha})"
    for verdict in out["equivalence"]["verdicts"]:
        name = {"positive_rate": "positive rate"}.get(verdict["figure"], verdict["figure"])
        assert verdict["text"] in rows[f"Equivalence of {name} within 5 points"][0]
    assert rows["Intervals of kappa and differences"][0] == ivs["methods"]["bootstrap"]
    assert rows["Prompting: Step screen: constraint"] == (
        "A: held on the server by structured outputs (choice) / B: free answer, read by the "
        "parser (not held on the server)",
        "manifest.json (constraints)",
    )
    # a run that is not a job folder has no methods to give: refused, nothing written
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.jsonl").write_bytes((free / "results.jsonl").read_bytes())
    argv = ["compare", str(held), str(bare), "--methods", str(tmp_path / "x.md")]
    again = sparkops(*argv, env=NO_COLUMNS, timeout=120)
    assert again.returncode == 2 and again.stdout == "", again
    assert again.stderr.strip() == (
        f"sparkops: error: --methods reads each run's job folder, but {bare} has no "
        "manifest.json; pass the runs' --out folders (not copies of results.jsonl), or drop "
        "--methods"
    )
    assert not (tmp_path / "x.md").exists()


def test_the_outcome_is_every_label_a_record_can_end_with():
    from sparkops.methods.document import final_labels
    from sparkops.pipeline.spec import load_pipeline
    from sparkops.samples import DEMO_PIPELINE

    # screen "no" and detail "mimic" end a record as surely as the confirm step's answers
    assert final_labels(load_pipeline(DEMO_PIPELINE)) == {"mimic", "no", "unclear", "yes"}
