"""`sparkops bench sweep` against the real local vLLM-CPU server: two levels, real report,
real plots, every record exactly once per level; and `--cold` refused cleanly where the
server does not expose vLLM's dev-mode cache reset."""

from __future__ import annotations

import argparse
import json
import stat

import matplotlib.pyplot as plt
import pytest

from sparkops.bench import cli
from sparkops.errors import UserError
from sparkops.plan import cli as plan_cli

pytestmark = pytest.mark.integration

RECORDS = 96
SHARED = (
    "You screen short made-up triage notes. Answer yes when the note describes sudden "
    "weakness, speech trouble or facial droop, otherwise answer no. "
) * 8


def write_job(tmp_path, model: str):
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "name: sweep-test\n"
        f"model: {model}\n"
        "steps:\n"
        "  - name: screen\n"
        f"    system: {json.dumps(SHARED)}\n"
        '    user: "Note: {text}"\n'
        "    max_tokens: 4\n"
        "    parse: {choices: [yes, no], default: unclear}\n"
        "    next: {yes: confirm, no: stop, unclear: confirm}\n"
        "  - name: confirm\n"
        f"    system: {json.dumps('Confirm the screen. ' + SHARED)}\n"
        '    user: "Note: {text}"\n'
        "    max_tokens: 4\n"
        "    parse: {choices: [yes, no], default: unclear}\n"
        "    next: {yes: stop, no: stop, unclear: stop}\n"
    )
    records = tmp_path / "records.jsonl"
    records.write_text(
        "".join(
            json.dumps({"id": f"r{i:03d}", "text": f"patient {i} with mild headache, day {i % 7}"})
            + "\n"
            for i in range(RECORDS)
        )
    )
    return pipeline, records


def sweep_args(server, pipeline, records, out, *extra):
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    argv = ["bench", "sweep", "--endpoint", server.base_url, "--pipeline", str(pipeline)]
    argv += ["--input", str(records), "--levels", "1,8", "--out", str(out), "--no-progress"]
    argv += ["--sample-interval", "0.5", *extra]
    return parser.parse_args(argv)


def test_two_level_sweep(vllm_server, tmp_path, capsys):
    pipeline, records = write_job(tmp_path, vllm_server.model)
    out = tmp_path / "sweep"
    extra = ("--level-one-limit", "12", "--profile", "cpu-tiny", "--machine", "gb10")
    args = sweep_args(vllm_server, pipeline, records, out, *extra)
    assert args.func(args) == 0

    table = json.loads((out / "sweep.json").read_text())
    levels = table["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 8]
    for lv, count in zip(levels, (12, RECORDS), strict=True):
        assert lv["records"] == count and lv["done"] + lv["errors"] == count
        assert lv["records_per_min"] > 0
        assert lv["generation_tok_s"] > 0
        assert lv["effective_tok_s"] > lv["computed_tok_s"] > lv["computed_prompt_tok_s"] > 0
        assert 0.0 < lv["hit_rate"] <= 1.0  # the shared system prompts are reused
        assert 0.0 <= lv["kv_usage_max"] <= 1.0
        assert lv["bottleneck"] in ("engine", "kv-cache", "front-end", "client")
    # Level 1 ran the first 12 records (--level-one-limit), level 8 all, each exactly once.
    for name, count in (("level-00001", 12), ("level-00008", RECORDS)):
        ids = [json.loads(line)["id"] for line in (out / name / "results.jsonl").open()]
        assert sorted(ids) == [f"r{i:03d}" for i in range(count)]

    # The planner fed the level-8 row predicts from that row's own figures (computed tok/s over
    # the steady window, tokens per record, the steady hit rate) ...
    capsys.readouterr()  # the sweep's own report
    parser = argparse.ArgumentParser()
    plan_cli.register(parser.add_subparsers())
    plan = parser.parse_args(["plan", "throughput", "--from-sweep", str(out), "--json"])
    assert plan.func(plan) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["target"] == "sweep level 8"
    row = levels[1]
    assert row["hit_rate_steady"] is not None  # read from the samples around the steady window
    per_record = row["prompt_tokens_per_record"] * (1 - row["hit_rate_steady"])
    per_record += row["gen_tokens_per_record"]
    expected = row["computed_tok_s"] * 60 / per_record
    assert check["predicted_records_per_min"] == pytest.approx(expected, rel=1e-9)
    assert check["measured_records_per_min"] == row["records_per_min"]
    # ... and reports its error against that row's measured rate, in the sentence the user reads.
    # How near it lands is timing (CI measured -33% on a busy 2-core machine, 7 runs here read
    # -2% to +20%): the planner's accuracy is a benchmark measured on the H200
    # (benchmarks/README.md), never a bound in a test.
    measured = row["records_per_min"]
    assert check["error"] == pytest.approx(check["predicted_records_per_min"] / measured - 1)
    assert f"({check['error']:+.1%})" in check["sentence"]
    assert "Planner check" in (out / "sweep.md").read_text()
    assert plt.imread(out / "decode_ceiling.png").shape[:2] == (400, 600)
    # Which level is faster is not asserted: on a busy 2-core machine it depends on the load
    # (a run of 2026-12-03 measured 620 records/min at 8 against 1,132 at 1); the speed-up is
    # a benchmark figure (benchmarks/README.md), the sweep's own report says it.

    report = (out / "sweep.md").read_text()
    # one row per level in each table: the sweep's, the planner check's, the decode ceiling's
    assert report.count("\n| 1 |") == 3 and report.count("\n| 8 |") == 3
    assert "![records_per_min.png](records_per_min.png)" in report
    for name in ("records_per_min.png", "hit_rate.png"):
        assert plt.imread(out / name).shape[:2] == (400, 600)
    for name in ("sweep.json", "sweep.md", "records_per_min.png"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600


def test_cold_needs_the_dev_endpoint(vllm_server, tmp_path):
    pipeline, records = write_job(tmp_path, vllm_server.model)
    out = tmp_path / "cold"
    args = sweep_args(vllm_server, pipeline, records, out, "--cold")
    with pytest.raises(UserError, match="VLLM_SERVER_DEV_MODE=1"):
        args.func(args)
    assert not list(out.glob("level-*"))  # refused before any level ran
