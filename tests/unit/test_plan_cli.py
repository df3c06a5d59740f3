"""`sparkops plan` command edge: argument parsing, config loading, table and JSON output."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from sparkops.errors import UserError
from sparkops.plan import bounds, cli


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sparkops")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.887", 0.887), ("88.7", 0.887), ("88.7%", 0.887), ("0.00887", 0.00887), ("0%", 0.0),
     ("1", 1.0), ("1%", 0.01), ("100%", 1.0)],
)  # fmt: skip
def test_hit_rate_forms(text, value):
    assert bounds.rate("--hit-rate", text, "hit rate") == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "why"),
    [("abc", "is not a hit rate"), ("120", "is above 100%"), ("-5%", "is not a hit rate"),
     ("nan", "is not a hit rate"), ("0.887%", "did you mean 88.7%?")],
)  # fmt: skip
def test_bad_hit_rate(text, why):
    with pytest.raises(UserError, match=f"^--hit-rate .*{re.escape(why)}"):
        bounds.rate("--hit-rate", text, "hit rate")


def test_throughput_json(capsys):
    argv = ["plan", "throughput", "--computed-tok-s", "2580", "--prompt-tokens-per-record", "3600"]
    argv += ["--gen-tokens-per-record", "300", "--hit-rate", "88.7%", "--records", "500000"]
    argv += ["--json"]
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert round(out["records_per_min"]) == 219
    assert round(out["effective_tok_s"], -2) == 14_200
    assert out["ceiling_records_per_min"] == 516
    assert out["table"][0]["hit_rate"] == pytest.approx(0.887)
    assert len(out["table"]) == 11


def test_throughput_table(capsys):
    argv = ["plan", "throughput", "--computed-tok-s", "1000", "--prompt-tokens-per-record", "1000"]
    argv += ["--gen-tokens-per-record", "100", "--hit-rate", "0.5", "--points", "2"]
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert "records / min" in out and "100.0" in out
    assert "52.0%" in out and "53.0%" not in out


def sweep_file(tmp_path, low_bottleneck="engine"):
    """A sweep.json as bench sweep writes it (only the fields the planner reads)."""
    rows = [
        {
            "concurrency": 240,
            "records_per_min": 110.0,
            "computed_tok_s": 1200.0,
            "prompt_tokens_per_record": 3600.0,
            "gen_tokens_per_record": 300.0,
            "hit_rate_steady": 0.89,
            "hit_rate": 0.885,
            "bottleneck": low_bottleneck,
        },
        {
            "concurrency": 960,
            "records_per_min": 149.0,
            "computed_tok_s": 1300.0,
            "prompt_tokens_per_record": 3600.0,
            "gen_tokens_per_record": 300.0,
            "hit_rate_steady": 0.94,
            "bottleneck": "engine",
        },
    ]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"cold": True, "levels": rows}))
    return path


def test_throughput_from_a_sweep_level_checks_itself(tmp_path, capsys):
    sweep = sweep_file(tmp_path)
    assert run(["plan", "throughput", "--from-sweep", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # level 960: 1,300 x 60 / (3,600 x 0.06 + 300)
    assert out["records_per_min"] == pytest.approx(78_000 / 516)
    assert out["check"]["measured_records_per_min"] == 149.0
    assert out["check"]["error"] == pytest.approx(78_000 / 516 / 149 - 1)
    argv = ["plan", "throughput", "--from-sweep", str(sweep), "--level", "960"]
    assert run([*argv, "--for-level", "240"]) == 0
    text = capsys.readouterr().out
    assert "calibrated on sweep level 960 (bound by the engine)" in text
    assert "predicted 112.1 records/min for sweep level 240, measured 110.0 (+1.9%)" in text


def test_a_steady_hit_rate_of_zero_is_used_not_replaced(tmp_path, capsys):
    # 0.0 is a measurement (nothing reused in the steady window); only a missing steady
    # figure falls back to the whole level's.
    sweep = sweep_file(tmp_path)
    levels = json.loads(sweep.read_text())
    levels["levels"][1].update(hit_rate_steady=0.0, hit_rate=0.5)
    sweep.write_text(json.dumps(levels))
    assert run(["plan", "throughput", "--from-sweep", str(sweep), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records_per_min"] == pytest.approx(1300 * 60 / (3600 + 300))
    del levels["levels"][1]["hit_rate_steady"]
    sweep.write_text(json.dumps(levels))
    assert run(["plan", "throughput", "--from-sweep", str(sweep), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records_per_min"] == pytest.approx(1300 * 60 / (3600 * 0.5 + 300))


def test_throughput_refuses_across_bottlenecks(tmp_path):
    sweep = sweep_file(tmp_path, low_bottleneck="front-end")
    argv = ["plan", "throughput", "--from-sweep", str(sweep), "--for-level", "240"]
    with pytest.raises(UserError, match="cannot predict sweep level 240 from sweep level 960"):
        run(argv)


def test_throughput_from_sweep_usage_errors(tmp_path):
    sweep = sweep_file(tmp_path)
    with pytest.raises(UserError, match="has no level 7: its levels are 240, 960"):
        run(["plan", "throughput", "--from-sweep", str(sweep), "--level", "7"])
    with pytest.raises(UserError, match="add --from-sweep"):
        run(["plan", "throughput", "--for-level", "240", "--computed-tok-s", "9"])
    with pytest.raises(UserError, match=r"--prompt-tokens-per-record .* is needed"):
        run(["plan", "throughput", "--computed-tok-s", "9"])
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(UserError, match=r"bad\.json"):
        run(["plan", "throughput", "--from-sweep", str(tmp_path / "bad.json")])


def test_memory_from_model_folder(tmp_path, capsys):
    config = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 2_000_000)  # 0.002 GB of "weights"
    argv = ["plan", "memory", "--config", str(tmp_path), "--memory-gb", "1.002"]
    argv += ["--seqs", "4", "--context", "1000", "--json"]
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weights_bytes"] == 2_000_000
    assert out["kv_cache_bytes"] == 1_000_000_000
    assert out["kv_bytes_per_token"] == 65_536
    assert out["usable_ctx_per_seq"] == 1_000_000_000 // 4 // 65_536
    assert out["seqs_at_context"] == 1_000_000_000 // 65_536_000
    assert out["max_num_seqs"] == 8
    assert out["fits"] is True


def test_memory_table_shows_flags(tmp_path, capsys):
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert run(["plan", "memory", "--config", str(path), "--weights-gb", "16"]) == 0
    out = capsys.readouterr().out
    assert "--kv-cache-memory-bytes" in out
    assert str(96_640_000_000 // (1 << 20) * (1 << 20)) in out  # 112.64 - 16 GB, whole MiB
    assert "expandable_segments" in out


def test_memory_without_weights_asks_for_them(tmp_path):
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 2}')
    with pytest.raises(UserError, match="--weights-gb"):
        run(["plan", "memory", "--config", str(tmp_path)])


def test_memory_bad_config_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        run(["plan", "memory", "--config", str(tmp_path), "--weights-gb", "1"])
    with pytest.raises(UserError, match="does not exist"):
        run(["plan", "memory", "--config", str(tmp_path / "nope.json"), "--weights-gb", "1"])
