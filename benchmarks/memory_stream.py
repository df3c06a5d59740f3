"""Memory: a 500,000-record job streams with a flat footprint (target: peak RSS < 300 MB).

Generates the input (about 200 bytes of made-up text per record), runs the whole job through
`run_job` at 1,000 in flight against the minimal local responder, and reports the client's
peak RSS (ru_maxrss) next to its RSS before the job.

    .venv/bin/python benchmarks/memory_stream.py [--records 500000] [--prefinished 480000]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from client_cost import running_responder, write_inputs

from sparkops.batch import JobConfig, run_job


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument(
        "--prefinished",
        type=int,
        default=0,
        help="start as a resume with this many records already in results.jsonl (same peak "
        "state: the full input streamed and every id in the done set, far fewer HTTP calls)",
    )
    args = ap.parse_args()
    with running_responder() as base:
        with tempfile.TemporaryDirectory() as tmp:
            pipeline, records = write_inputs(Path(tmp), 0, "tiny")
            filler = "made-up triage text " * 10
            with records.open("w") as fh:
                for i in range(args.records):
                    fh.write(json.dumps({"id": f"r{i:07d}", "text": f"{i} {filler}"}) + "\n")
            size_mb = records.stat().st_size / 2**20
            job = Path(tmp) / "job"
            if args.prefinished:
                job.mkdir()
                with (job / "results.jsonl").open("w") as fh:
                    for i in range(args.prefinished):
                        line = {"id": f"r{i:07d}", "status": "done", "final": "no", "steps": []}
                        fh.write(json.dumps(line) + "\n")
            before = rss_mb()
            t0 = time.monotonic()
            summary = run_job(
                JobConfig(
                    input=records,
                    out=job,
                    endpoints=[base],
                    pipeline=pipeline,
                    concurrency=args.concurrency,
                    progress=False,
                )
            )
            elapsed = time.monotonic() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            json.dumps(
                {
                    "records": args.records,
                    "input_mb": round(size_mb, 1),
                    "prefinished": args.prefinished,
                    "done_this_run": summary.done,
                    "skipped": summary.skipped,
                    "rss_before_mb": round(before, 1),
                    "peak_rss_mb": round(peak, 1),
                    "elapsed_s": round(elapsed, 1),
                }
            )
        )


if __name__ == "__main__":
    main()
