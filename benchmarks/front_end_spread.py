"""How evenly the kit's calls spread over a multi-process front end (vLLM --api-server-count).

A stand-in for vLLM's API servers, built the same way: N worker processes accept on one
shared listening socket (asyncio's accept loop takes every pending connection it finds),
and each request costs its worker `--burn-ms` of CPU (a long prompt's tokenization), so a
busy worker is late to the accept. The kit's job runs against it with and without the
connection measures of batch/connections.py; the figures are each worker's share of the
requests (an even spread over 4 workers is 25% each).

    .venv/bin/python benchmarks/front_end_spread.py [--workers 4] [--records 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import tempfile
import time
import urllib.request
from pathlib import Path

from aiohttp import web

from sparkops.batch import JobConfig, run_job_async

BODY = (
    b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"no"},"finish_reason":"stop"}],"usage":'
    b'{"prompt_tokens":100,"completion_tokens":1,"total_tokens":101}}'
)


def _worker(sock: socket.socket, index: int, counts, burn_s: float) -> None:
    async def chat(request: web.Request) -> web.Response:
        await request.read()
        end = time.perf_counter() + burn_s
        while time.perf_counter() < end:  # blocking, as tokenization is
            pass
        with counts.get_lock():
            counts[index] += 1
        return web.Response(body=BODY, content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny"}]})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        await asyncio.Event().wait()

    asyncio.run(main())


class SharedSocketServer:
    """`workers` processes serving one listening socket; `counts` per worker."""

    def __init__(self, workers: int, burn_ms: float) -> None:
        ctx = mp.get_context("fork")
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(2048)
        self.sock.setblocking(False)
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.counts = ctx.Array("l", workers)
        self.procs = [
            ctx.Process(target=_worker, args=(self.sock, i, self.counts, burn_ms / 1000))
            for i in range(workers)
        ]

    def __enter__(self) -> SharedSocketServer:
        for p in self.procs:
            p.start()
        for _ in range(100):
            try:
                urllib.request.urlopen(self.base + "/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
            p.join(10)
        self.sock.close()

    def snapshot(self) -> list[int]:
        return list(self.counts)


def write_job(tmp: Path, n: int) -> tuple[Path, Path]:
    pipeline = tmp / "p.yaml"
    pipeline.write_text(
        "name: spread\nmodel: tiny\nsteps:\n  - name: s\n    user: 'Note: {text}'\n"
        "    max_tokens: 1\n    parse: {choices: [yes, no]}\n"
    )
    records = tmp / "in.jsonl"
    records.write_text(
        "".join(json.dumps({"id": f"r{i}", "text": f"record {i}"}) + "\n" for i in range(n))
    )
    return pipeline, records


def spread(
    server: SharedSocketServer, tmp: Path, n: int, concurrency: int, recycle: int, gap: float
) -> dict:
    """Run one job; each worker's share of its requests, in percent."""
    pipeline, records = write_job(tmp, n)
    before = server.snapshot()
    cfg = JobConfig(
        input=records,
        out=tmp / f"job-{time.time_ns()}",
        endpoints=[server.base],
        pipeline=pipeline,
        concurrency=concurrency,
        progress=False,
        recycle_every=recycle,
        connect_gap=gap,
    )
    t0 = time.monotonic()
    summary = asyncio.run(run_job_async(cfg))
    wall = time.monotonic() - t0
    got = [a - b for a, b in zip(server.snapshot(), before, strict=True)]
    total = sum(got)
    shares = [round(100 * g / total, 1) for g in got]
    return {
        "recycle_every": recycle,
        "connect_gap_s": gap,
        "done": summary.done,
        "calls_per_s": round(total / wall, 1),
        "shares_pct": shares,
        "max_over_min": round(max(got) / max(1, min(got)), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--burn-ms", type=float, default=2.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, SharedSocketServer(args.workers, args.burn_ms) as s:
        for recycle, gap in ((0, 0.0), (128, 0.0), (0, 0.001), (128, 0.001)):
            row = spread(s, Path(tmp), args.records, args.concurrency, recycle, gap)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
