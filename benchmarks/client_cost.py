"""Client cost: CPU microseconds per request at 1,000 in flight, sparkops vs a plain aiohttp loop.

Same run, same targets, same payloads: (1) a minimal local responder (client cost alone),
(2) a real vLLM server if `--vllm URL` is given. The sparkops figure is the whole job
(`run_job`: input scan, journal with fsync, /metrics sampler, routing, and its collector
settings, batch/collector.py); the plain loop only posts and decodes, and runs twice: with
Python's default collector (`ratio`, the target: <= 1.2) and with the kit's collector settings
(`ratio_tuned_gc`: the kit's own work alone).

    .venv/bin/python benchmarks/client_cost.py [--requests 20000] [--vllm http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp

from sparkops.batch import JobConfig, run_job_async

try:
    from sparkops.batch import collector
except ImportError:  # a kit from before the job's collector settings
    collector = None  # type: ignore[assignment]
try:
    from sparkops.batch.connections import RECYCLE_EVERY
except ImportError:  # a kit from before connection recycling (before/after comparisons)
    RECYCLE_EVERY = None  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_responder(shape: Sequence[str] = ()) -> Iterator[str]:
    """The minimal local HTTP responder in a subprocess on a free port; yields its base URL.
    `shape`: its options (`--hold-ms MS`, `--vllm-body`)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "client_responder.py"), str(port), *shape])
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def write_inputs(tmp: Path, n: int, model: str) -> tuple[Path, Path]:
    pipeline = tmp / "p.yaml"
    pipeline.write_text(
        f"name: bench\nmodel: {model}\nsteps:\n  - name: s\n    system: 'Answer yes or no.'\n"
        "    user: 'Note: {text}'\n    max_tokens: 1\n    parse: {choices: [yes, no]}\n"
    )
    records = tmp / "in.jsonl"
    with records.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"r{i}", "text": f"record number {i}"}) + "\n")
    return pipeline, records


def body(i: int, model: str) -> bytes:
    return json.dumps(
        {
            "model": model,
            "messages": [
                {"role": "system", "content": "Answer yes or no."},
                {"role": "user", "content": f"Note: record number {i}"},
            ],
            "max_tokens": 1,
            "temperature": 0,
        }
    ).encode()


async def plain_loop(base: str, n: int, concurrency: int, model: str) -> float:
    """The reference: semaphore + one pooled aiohttp session, nothing else."""
    sem = asyncio.Semaphore(concurrency)
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one(i: int) -> None:
            async with (
                sem,
                session.post(
                    base + "/v1/chat/completions",
                    data=body(i, model),
                    headers={"Content-Type": "application/json"},
                ) as resp,
            ):
                json.loads(await resp.read())

        t0 = time.process_time()
        await asyncio.gather(*(one(i) for i in range(n)))
        return (time.process_time() - t0) / n * 1e6


async def sparkops_job(
    base: str, n: int, concurrency: int, model: str, tmp: Path, recycle: int | None = RECYCLE_EVERY
) -> float:
    pipeline, records = write_inputs(tmp, n, model)
    cfg = JobConfig(
        input=records,
        out=tmp / f"job-{time.time_ns()}",
        endpoints=[base],
        pipeline=pipeline,
        concurrency=concurrency,
        progress=False,
        **({} if recycle is None else {"recycle_every": recycle}),
    )
    t0 = time.process_time()
    summary = await run_job_async(cfg)
    assert summary.done == n, summary
    return (time.process_time() - t0) / n * 1e6


def measure(
    name: str, base: str, n: int, concurrency: int, model: str, rounds: int, recycle: int | None
) -> dict:
    """`rounds` pairs after an uncounted warm-up pair, the order alternating (the first run
    against a server pays for its warm-up: the first pair read 1.53-1.63 on an H200 where the
    others read 1.22-1.39); median of each."""
    plain: list[float] = []
    ours: list[float] = []
    tuned: list[float] = []  # the bare loop under the kit's collector settings

    def ours_once(tmp: Path) -> float:
        return asyncio.run(sparkops_job(base, n, concurrency, model, tmp, recycle))

    def plain_tuned() -> float:
        with collector.tuned_for_job():
            return asyncio.run(plain_loop(base, n, concurrency, model))

    with tempfile.TemporaryDirectory() as tmp:
        # One uncounted pair first: a process's first job pays one-off costs (lazy imports,
        # the server's first requests) that are not per request.
        asyncio.run(plain_loop(base, min(n, 2000), concurrency, model))
        ours_once(Path(tmp))
        for i in range(rounds):
            if i % 2 == 0:
                plain.append(asyncio.run(plain_loop(base, n, concurrency, model)))
                ours.append(ours_once(Path(tmp)))
                if collector is not None:
                    tuned.append(plain_tuned())
            else:
                if collector is not None:
                    tuned.append(plain_tuned())
                ours.append(ours_once(Path(tmp)))
                plain.append(asyncio.run(plain_loop(base, n, concurrency, model)))
    row = {
        "target": name,
        "requests": n,
        "in_flight": concurrency,
        "rounds": rounds,
        "recycle_every": recycle,
        "plain_us": round(statistics.median(plain)),
        "sparkops_us": round(statistics.median(ours)),
        "ratio": round(statistics.median(ours) / statistics.median(plain), 2),
        "ratios": [round(o / p, 2) for o, p in zip(ours, plain, strict=True)],
    }
    if tuned:  # the kit's own work, the collector's settings alike on both sides
        row["plain_tuned_gc_us"] = round(statistics.median(tuned))
        row["ratio_tuned_gc"] = round(statistics.median(ours) / statistics.median(tuned), 2)
    print(json.dumps(row), flush=True)
    return row


def profile(base: str, n: int, concurrency: int, model: str, out: Path) -> None:
    """cProfile of one kit job in CPU time (waiting in epoll is not the client's cost): the
    hot path, self time first, then cumulative."""
    prof = cProfile.Profile(time.process_time)
    with tempfile.TemporaryDirectory() as tmp:
        prof.enable()
        us = asyncio.run(sparkops_job(base, n, concurrency, model, Path(tmp)))
        prof.disable()
    buf = io.StringIO()
    buf.write(f"{us:.0f} us/request under the profiler\n")
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    out.write_text(buf.getvalue())


def served_model(base: str) -> str:
    with urllib.request.urlopen(base + "/v1/models", timeout=10) as resp:
        return json.load(resp)["data"][0]["id"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--vllm-requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--vllm", help="base URL of a running vLLM server")
    ap.add_argument("--rounds", type=int, default=5, help="alternating pairs per target")
    ap.add_argument(
        "--recycle-every",
        type=int,
        default=RECYCLE_EVERY,
        help="the kit's requests per kept-alive connection (0: never recycle)",
    )
    ap.add_argument("--no-local", action="store_true", help="skip the local responder")
    ap.add_argument(
        "--hold-ms", type=float, default=0.0, help="the local responder holds each answer this long"
    )
    ap.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="the local responder answers in bursts at every multiple of this (an engine step)",
    )
    ap.add_argument(
        "--vllm-body", action="store_true", help="the local responder answers vLLM's fields"
    )
    ap.add_argument("--profile", type=Path, help="also profile one kit job, top 40 to this file")
    args = ap.parse_args()
    if not args.no_local:
        shape = [f"--hold-ms={args.hold_ms}", f"--step-ms={args.step_ms}"]
        shape += ["--vllm-body"] if args.vllm_body else []
        with running_responder(shape) as base:
            measure(
                "local responder",
                base,
                args.requests,
                args.concurrency,
                "tiny",
                args.rounds,
                args.recycle_every,
            )
            if args.profile and not args.vllm:
                profile(base, args.requests, args.concurrency, "tiny", args.profile)
    if args.vllm:
        base = args.vllm.rstrip("/").removesuffix("/v1")
        model = served_model(base)
        measure(
            f"vLLM {base}",
            base,
            args.vllm_requests,
            args.concurrency,
            model,
            args.rounds,
            args.recycle_every,
        )
        if args.profile:
            profile(base, args.vllm_requests, args.concurrency, model, args.profile)


if __name__ == "__main__":
    main()
