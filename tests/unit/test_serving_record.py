"""The serving record's pure core (jobdir/identity.py) and its job file (batch/serving.py)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sparkops import local_stack
from sparkops.batch import serving
from sparkops.batch.engine import Stats
from sparkops.batch.progress import ProgressView
from sparkops.compare import serving as compare_serving
from sparkops.errors import UserError
from sparkops.jobdir import identity as serving_identity
from sparkops.jobdir.identity import IdentityChange, build_identity, cache_config, diff
from sparkops.local import state as local_state
from sparkops.local.server import Server
from sparkops.procs import proc_argv, proc_start_ticks
from sparkops.render import render_inventory
from sparkops.report import serving as report_serving
from tests.plugins.inventories import make_inventory

# vLLM 0.11-style /metrics excerpt: cache_config_info is an info gauge with the engine label.
METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",\
engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="2048",\
prefix_caching_hash_algo="sha256"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""
MODELS = {
    "object": "list",
    "data": [{"id": "m", "root": "/models/m", "max_model_len": 8192, "owned_by": "vllm"}],
}


def identity(**over):
    ident = build_identity({"version": "0.11.0"}, MODELS, cache_config(METRICS))
    ident.update(over)
    return ident


def test_identity_holds_version_model_length_and_every_cache_label():
    ident = identity()
    assert ident == {
        "version": "0.11.0",
        "model": "m",
        "max_model_len": "8192",
        "root": "/models/m",
        "cache.block_size": "16",
        "cache.cache_dtype": "auto",
        "cache.enable_prefix_caching": "True",
        "cache.gpu_memory_utilization": "0.9",
        "cache.num_gpu_blocks": "2048",
        "cache.prefix_caching_hash_algo": "sha256",
    }


def test_a_server_without_version_or_cache_config_still_has_an_identity():
    ident = build_identity(None, {"data": [{"id": "b"}, {"id": "a", "max_model_len": 4}]}, None)
    assert ident == {"version": "", "model": "a, b", "max_model_len": "4, ", "root": ", "}


def test_a_page_that_is_not_a_model_list_is_refused_not_read_as_an_identity():
    with pytest.raises(ValueError):
        build_identity({"version": "1"}, {"detail": "Not Found"}, None)
    with pytest.raises(ValueError):
        cache_config("<html>proxy error</html>\n{")


def test_cache_config_is_empty_when_the_page_has_none():
    assert cache_config("# TYPE x gauge\nx 1\n") == {}


def test_no_change_no_drift():
    assert diff(identity(), identity()) == []


def test_diff_names_model_and_length_first_and_reads_as_one_phrase():
    after = identity(model="other", max_model_len="4096", **{"cache.block_size": "32"})
    changes = diff(identity(), after)
    assert [c.field for c in changes] == ["model", "max_model_len", "cache.block_size"]
    assert serving_identity.describe(changes) == (
        "model m -> other, max_model_len 8192 -> 4096, cache.block_size 16 -> 32"
    )


def test_a_field_that_appears_or_disappears_is_a_change():
    before = identity()
    after = dict(before)
    del after["cache.cache_dtype"]
    after["cache.kv_offload"] = "on"
    assert {c.field: (c.before, c.after) for c in diff(before, after)} == {
        "cache.cache_dtype": ("auto", None),
        "cache.kv_offload": (None, "on"),
    }
    assert IdentityChange("x", None, "").text() == "x (absent) -> (none)"


def test_describe_is_bounded():
    changes = [IdentityChange(f"cache.f{i}", "1", "2") for i in range(7)]
    assert serving_identity.describe(changes).endswith("and 3 more")


# ---- the job file (serving.jsonl) ------------------------------------------------------


def test_log_marks_the_boundary_and_a_resumed_job_continues_the_epochs(tmp_path):
    log = serving.ServingLog.load(tmp_path)
    ctx = serving.job_context("pf", "if", {"unavailable": "x"}, None)
    assert log.write_start(1, {"http://a": identity()}, {}, ctx, 0) == {}
    assert log.observe(1, "http://a", identity(), 5) == []
    changes = log.observe(1, "http://a", identity(model="other"), 7)
    assert [c.field for c in changes] == ["model"]
    assert log.epoch == 1
    lines = [json.loads(x) for x in (tmp_path / serving.SERVING).read_text().splitlines()]
    assert [x["event"] for x in lines] == ["start", "change"]
    assert lines[1]["results_from"] == 7 and lines[1]["serving"] == 1
    assert lines[0]["kit_version"] and lines[0]["pipeline_fingerprint"] == "pf"
    assert stat.S_IMODE(os.stat(tmp_path / serving.SERVING).st_mode) == 0o600

    again = serving.ServingLog.load(tmp_path)
    assert again.epoch == 1
    assert again.baseline["http://a"]["model"] == "m"
    assert again.last["http://a"]["model"] == "other"
    # the server went back to what the job started with: a change against the last record,
    # and no longer off the baseline (--strict-serving lets it resume)
    found = {"http://a": identity()}
    assert again.off_baseline(found) == {}
    changed = again.write_start(2, found, {}, ctx, 9)
    assert list(changed) == ["http://a"] and again.epoch == 2


def test_an_endpoint_unreachable_at_start_gets_its_baseline_when_it_answers(tmp_path):
    log = serving.ServingLog.load(tmp_path)
    ctx = serving.job_context("pf", "if", {}, None)
    log.write_start(1, {"http://a": None}, {"http://a": "ClientConnectorError"}, ctx, 0)
    first = json.loads((tmp_path / serving.SERVING).read_text())
    assert first["endpoints"] == {"http://a": {"unreachable": "ClientConnectorError"}}
    assert log.observe(1, "http://a", identity(), 3) == []  # first seen: not drift
    assert log.epoch == 0
    assert log.observe(1, "http://a", identity(version="0.12.0"), 4)[0].field == "version"


def test_stack_record_loses_secrets_at_any_depth(tmp_path):
    path = tmp_path / "stack-record.json"
    path.write_text(
        json.dumps(
            {
                "profile": "p",
                "env": {"HF_TOKEN": "hf_x", "VLLM_API_KEY": "k", "VLLM_NO_USAGE_STATS": "1"},
                "nested": [{"password": "p", "ok": 1}],
            }
        )
    )
    record = serving.read_stack_record(path)
    assert record == {"profile": "p", "env": {"VLLM_NO_USAGE_STATS": "1"}, "nested": [{"ok": 1}]}
    assert "hf_x" not in json.dumps(record)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "does not exist"),
        ("not json", "is not valid JSON (line 1: Expecting value)"),
        ("[1, 2]", "is not a JSON object"),
        ("dir", "cannot be read (IsADirectoryError)"),
    ],
)
def test_a_missing_or_bad_stack_record_is_a_usage_error(tmp_path, content, says):
    path = tmp_path / "stack-record.json"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=re.escape(says)):
        serving.read_stack_record(path)


def test_gpu_state_never_fails_and_never_describes_a_remote_gpu(monkeypatch, tmp_path):
    assert serving.gpu_state(["http://10.0.0.5:8000"]) == {
        "unavailable": "the endpoints are not on this machine"
    }
    monkeypatch.setattr(serving, "_gpu_check_path", lambda: None)
    assert "not installed" in serving.gpu_state(["http://127.0.0.1:8000"])["unavailable"]
    tool = tmp_path / "gpu-check"
    tool.write_text("#!/bin/sh\necho 'not json'\nexit 4\n")
    tool.chmod(0o755)
    monkeypatch.setattr(serving, "_gpu_check_path", lambda: str(tool))
    assert serving.gpu_state(["http://localhost:1"]) == {
        "unavailable": "sparkops-gpu-check printed no JSON (exit 4)"
    }
    tool.write_text('#!/bin/sh\necho \'{"state": "no-gpu", "rc": 4, "gpu": null}\'\nexit 4\n')
    assert serving.gpu_state(["http://[::1]:8000"]) == {"state": "no-gpu", "rc": 4, "gpu": None}


# ---- the stack's own record (render/record.py) ------------------------------------------


def test_every_render_writes_a_stack_record_without_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    monkeypatch.setenv("VLLM_API_KEY", "api-secret")
    out = tmp_path / "out"
    inv = make_inventory(
        tmp_path / "inv", "single", vllm_serving_extra_env={"MY_API_KEY": "zzz", "FOO": "1"}
    )
    render_inventory(inv, out)
    path = out / "spark-1" / "stack-record.json"
    text = path.read_text()
    assert "secret" not in text and "zzz" not in text
    record = json.loads(text)
    compose = yaml.safe_load((out / "spark-1" / "compose.yml").read_text())["services"]["vllm"]
    assert record["command"] == compose["entrypoint"] + compose["command"]
    assert record["image"] == compose["image"]
    assert record["profile"] and record["role"] == "single" and record["host"] == "spark-1"
    assert record["env"]["FOO"] == "1" and record["env"]["VLLM_NO_USAGE_STATS"] == "1"
    assert "MY_API_KEY" not in record["env"]
    assert serving.read_stack_record(path) == record


# ---- the progress line -------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_a_change_is_said_above_the_bar_or_as_a_warning_and_marks_the_bar(capsys, enabled):
    view = ProgressView(Stats(), 10, 0, enabled=enabled)
    text = serving.change_sentence("http://[::1]:8000", diff(identity(), identity(model="x")), 1)
    with view:
        view.say(text)
    err = capsys.readouterr().err
    expected = text if enabled else f"sparkops: warning: {text}"
    assert expected in err.replace("\n", "") and "Traceback" not in err
    assert view.drift == "serving changed (serving.jsonl)"
    assert view._progress.tasks[0].fields["stalled"] == "serving changed (serving.jsonl)"


def test_gpu_state_is_the_real_gpu_checks_answer_about_the_fixture_gpu(monkeypatch, tmp_path):
    """sparkops-gpu-check itself runs, reading the fixture nvidia-smi (a GB10's answers)."""
    smi = Path(__file__).parents[1] / "fixtures" / "bin" / "nvidia-smi"
    tool = tmp_path / "sparkops-gpu-check"
    tool.write_text(
        f'#!/bin/sh\nexec {sys.executable} -m sparkops.doctor.gpu "$@" --nvidia-smi {smi}\n'
    )
    tool.chmod(0o755)
    monkeypatch.setattr(serving, "_gpu_check_path", lambda: str(tool))
    gpu = serving.gpu_state(["http://127.0.0.1:8000"])
    assert gpu["gpu"]["name"] == "NVIDIA GB10" and gpu["gpu"]["driver_version"] == "580.95.05"
    assert gpu["samples"] == 2  # GPU_CHECK_ARGS: a short look, not the 5 s default
    text = report_serving.gpu_text(gpu)
    assert "name NVIDIA GB10" in text and "cuda_version 13.0" in text and "check: " in text


# ---- compare: two runs' setups -------------------------------------------------------------


def test_compare_pairs_endpoints_by_position_and_reads_stack_and_gpu(tmp_path):
    ctx_a = serving.job_context("pf", "if", {"gpu": {"name": "NVIDIA GB10", "pstate": "P8"}}, None)
    ctx_b = serving.job_context("pf", "if", {"gpu": {"name": "NVIDIA GB10", "pstate": "P0"}}, {})
    a, b = tmp_path / "a", tmp_path / "b"
    for out, ctx, port, ident in (
        (a, ctx_a, 1, identity()),
        (b, ctx_b, 2, identity(version="0.12")),
    ):
        out.mkdir()
        found = {f"http://h:{port}": ident, f"http://h:{port}0": identity()}
        serving.ServingLog.load(out).write_start(1, found, {}, ctx, 0)
    setup_a, setup_b = compare_serving.load_setup(a), compare_serving.load_setup(b)
    assert setup_a is not None and setup_b is not None
    assert setup_a.fields["gpu.name"] == "NVIDIA GB10" and "gpu.pstate" not in setup_a.fields
    changes = compare_serving.setup_diff(setup_a, setup_b)
    assert [(c.field, c.before, c.after) for c in changes] == [
        ("endpoint 1 version", "0.11.0", "0.12")
    ]
    assert compare_serving.load_setup(tmp_path / "none") is None


def test_no_local_stack_without_a_live_local_server_on_record(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKOPS_CACHE", str(tmp_path))
    assert local_stack.find(["http://127.0.0.1:8000"]) is None  # nothing on record
    # on record, but that pid is not (or no longer) the server: start time and argv differ
    gone = Server(pid=os.getpid(), port=8000, start_ticks=1, started_at=0.0, log_path="x")
    local_state.save([gone])
    assert local_stack.find(["http://127.0.0.1:8000/v1"]) is None


def test_local_up_writes_the_stack_record_a_job_reads_while_that_server_runs(tmp_path):
    """`local up` saves its servers (local.state); the job reads sparkops.local_stack's record
    (no import of `local`), believed only while that pid runs that command line."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "stand-in-server"]
    proc = subprocess.Popen(argv)
    try:
        # Popen returns once exec has begun; the new command line shows in /proc a moment later
        deadline = time.monotonic() + 10
        while proc_argv(proc.pid) != argv and time.monotonic() < deadline:
            time.sleep(0.01)
        ticks = proc_start_ticks(proc.pid)
        assert ticks is not None
        server = Server(pid=proc.pid, port=8123, start_ticks=ticks, started_at=5.0, log_path="x")
        local_state.save([server], cache=tmp_path)
        record = json.loads((tmp_path / "local" / "stack-record.json").read_text())
        assert record["servers"][0]["command"] == argv
        assert stat.S_IMODE((tmp_path / "local" / "stack-record.json").stat().st_mode) == 0o600
        found = local_stack.find(["http://127.0.0.1:8123/v1"], cache=tmp_path)
        assert found == {
            "local": True,
            "endpoint": "http://127.0.0.1:8123",
            "model": server.model,
            "started_at": 5.0,
            "command": argv,
        }
        assert local_stack.find(["http://127.0.0.1:9999/v1"], cache=tmp_path) is None
    finally:
        proc.kill()
        proc.wait()
    assert local_stack.find(["http://127.0.0.1:8123/v1"], cache=tmp_path) is None  # gone
    (tmp_path / "local" / "stack-record.json").write_text("{not json")
    assert local_stack.find(["http://127.0.0.1:8123/v1"], cache=tmp_path) is None
    local_state.save([], cache=tmp_path)
    assert not (tmp_path / "local" / "stack-record.json").exists()


# ---- capacity: concurrency against --max-num-seqs ------------------------------------------


@pytest.mark.parametrize(
    ("command", "seqs"),
    [
        (["vllm", "serve", "m", "--max-num-seqs", "256"], 256),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--max-num-seqs=64"], 64),
        (["vllm", "serve", "m"], None),  # not set: vLLM's default is not guessed
        (["vllm", "serve", "m", "--max-num-seqs"], None),
        (["vllm", "serve", "m", "--max-num-seqs", "many"], None),
        (["vllm", "serve", "m", "--max-num-seqs", "0"], None),
    ],
)
def test_max_num_seqs_is_read_from_the_stack_records_command(command, seqs):
    assert serving_identity.max_num_seqs({"command": command}) == seqs


def test_no_stack_record_means_no_capacity():
    assert serving_identity.max_num_seqs(None) is None
    assert serving_identity.max_num_seqs({"command": "vllm serve"}) is None
    assert serving_identity.capacity(None, 1000, 1) is None
    assert serving_identity.capacity_warning(None) is None


def test_the_calls_one_endpoint_gets_are_compared():
    stack = {"command": ["vllm", "serve", "m", "--max-num-seqs", "256"]}
    two = serving_identity.capacity(stack, 1000, 2)
    assert two == {"max_num_seqs": 256, "concurrency": 1000, "per_endpoint": 500, "over": True}
    assert serving_identity.capacity_warning(two) == (
        "--concurrency 1000 (500 per endpoint) is above the server's --max-num-seqs 256: about "
        "244 requests at a time wait in the server's queue instead of running (the report "
        "shows them as waiting requests); lower --concurrency to 256 or raise --max-num-seqs"
    )
    within = serving_identity.capacity(stack, 512, 2)
    assert within is not None and within["over"] is False
    assert serving_identity.capacity_warning(within) is None
