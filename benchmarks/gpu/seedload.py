"""Seed-shaped load at fixed calls in flight, with the server's /metrics sampled each second.

The seed (a GB10 running Gemma 4 12B for a screening pipeline) sends about 3,600 prompt tokens
and gets about 300 written tokens per record, over about 2.4 calls, 88.7% of the prompt tokens
shared instructions. Dummy weights never stop early, so every call here has its own exact
length (`ignore_eos`) drawn from a spread, and records take 1, 2 or 3 calls (20/20/60%, mean
2.4): calls finish at scattered times, with no lockstep waves. Each call is
`/v1/completions` with token ids (exact counts, any tokenizer): one of three shared step
prefixes (`--shared` tokens) then the record's own tokens (uniform 100-240, the same record
text in each of its calls), `max_tokens` uniform 20-230 (mean 125). Each level keeps exactly N
calls in flight (N workers, each running records one after another) for `--seconds`, then
drains; its steady window starts `--warm` seconds in.

    python3 seedload.py --endpoint http://127.0.0.1:8000 --model NAME --levels 1,240,480,960 \
        --out DIR [--seconds 80] [--warm 20] [--choice]      (writes DIR/levels.json, ...)

`--max-tokens 2` with and without `--choice` (issue 33's evidence): every call writes 2 tokens,
the second run with `structured_outputs: {"choice": [...]}`, pricing the guided-decoding path
at the same in-flight levels.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

STEP_P = (0.2, 0.2, 0.6)  # records ending after 1, 2, 3 calls: mean 2.4 calls per record
OWN = (100, 240)  # record's own tokens per call, uniform
OUT_TOKENS = (20, 230)  # written tokens per call, uniform (mean 125)
IDS = (3, 500)  # token ids used (the kit's tiny tokenizer has 512; 0-2 are special)
WANT = {
    "vllm:kv_cache_usage_perc": "kv",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_preemptions": "preempt",
    "vllm:prefix_cache_queries": "pq",
    "vllm:prefix_cache_hits": "ph",
    "vllm:prompt_tokens": "ptok",
    "vllm:generation_tokens": "gtok",
    "vllm:request_success": "done",
}


def parse_metrics(text: str) -> dict[str, float]:
    """The families above, summed over their samples (one engine; counters' _total only)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        key = WANT.get(fam.name.removesuffix("_total"))
        if key is None:
            continue
        for s in fam.samples:
            if s.name.endswith(("_created", "_bucket", "_sum", "_count")):
                continue
            if key == "kv":  # a gauge per engine: the largest
                out[key] = max(out.get(key, 0.0), s.value)
            else:
                out[key] = out.get(key, 0.0) + s.value
    return out


async def sampler(session: aiohttp.ClientSession, url: str, sink: list[dict], stop: asyncio.Event):
    while not stop.is_set():
        t = time.time()
        try:
            async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
                row = parse_metrics(await r.text())
            row["t"] = t
            sink.append(row)
        except Exception as exc:  # a missed sample is a gap, not a failed run
            sink.append({"t": t, "error": type(exc).__name__})
        await asyncio.sleep(max(0.0, 1.0 - (time.time() - t)))


class Level:
    def __init__(self, args, n: int, prefixes: list[list[int]], seed: int):
        self.a, self.n, self.prefixes = args, n, prefixes
        self.rng = random.Random(seed)
        self.calls: list[tuple] = []  # (t0, t1, step, prompt_len, max_tokens, cached, ok)
        self.records: list[tuple] = []  # (t_first_call, t_done, n_calls)
        self.errors: list[str] = []
        self.stop_at = 0.0

    def record(self) -> tuple[int, list[int]]:
        r = self.rng.random()
        k = 1 if r < STEP_P[0] else 2 if r < STEP_P[0] + STEP_P[1] else 3
        own = [self.rng.randint(*IDS) for _ in range(self.rng.randint(*OWN))]
        return k, own

    async def call(self, session, step: int, own: list[int]) -> None:
        prompt = self.prefixes[step] + own
        mt = self.a.max_tokens or self.rng.randint(*OUT_TOKENS)
        body: dict = {
            "model": self.a.model,
            "prompt": prompt,
            "max_tokens": mt,
            "temperature": 0,
            "ignore_eos": True,
        }
        if self.a.choice:
            body["structured_outputs"] = {"choice": ["yes", "no", "unclear"]}
            body.pop("ignore_eos")
        t0 = time.time()
        cached, ok = -1, False
        try:
            async with session.post(self.a.endpoint + "/v1/completions", json=body) as r:
                js = await r.json(content_type=None)
                if r.status == 200:
                    ok = True
                    details = (js.get("usage") or {}).get("prompt_tokens_details") or {}
                    cached = details.get("cached_tokens", -1) or 0
                elif len(self.errors) < 20:
                    self.errors.append(f"{r.status} {str(js)[:300]}")
        except Exception as exc:
            if len(self.errors) < 20:
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
        self.calls.append((t0, time.time(), step, len(prompt), mt, cached, ok))

    async def worker(self, session) -> None:
        while time.time() < self.stop_at:
            k, own = self.record()
            t0 = time.time()
            for step in range(k):
                await self.call(session, step, own)
            self.records.append((t0, time.time(), k))


def window_summary(lv: Level, samples: list[dict], a: float, b: float, shared: int) -> dict:
    ss = [s for s in samples if a <= s["t"] <= b and "kv" in s]
    calls = [c for c in lv.calls if a <= c[1] <= b]
    recs = [r for r in lv.records if a <= r[1] <= b]
    dt = (ss[-1]["t"] - ss[0]["t"]) if len(ss) > 1 else float("nan")

    def delta(k: str) -> float:
        return ss[-1].get(k, 0.0) - ss[0].get(k, 0.0) if len(ss) > 1 else float("nan")

    plen = sum(c[3] for c in calls) or 1
    ceil64 = sum(min(shared, c[3] - 1) // 64 * 64 for c in calls) / plen
    ceil16 = sum(min(shared, c[3] - 1) // 16 * 16 for c in calls) / plen
    cached = [c for c in calls if c[5] >= 0]
    pq, ph, pt, gt = delta("pq"), delta("ph"), delta("ptok"), delta("gtok")
    kv = [s["kv"] for s in ss]
    return {
        "window_s": round(dt, 1),
        "samples": len(ss),
        "kv_mean_pct": round(100 * sum(kv) / len(kv), 1) if kv else None,
        "kv_peak_pct": round(100 * max(kv), 1) if kv else None,
        "kv_p10_pct": round(100 * sorted(kv)[len(kv) // 10], 1) if kv else None,
        "running_mean": round(sum(s.get("running", 0) for s in ss) / max(1, len(ss)), 1),
        "running_min": min((s.get("running", 0) for s in ss), default=None),
        "waiting_mean": round(sum(s.get("waiting", 0) for s in ss) / max(1, len(ss)), 1),
        "waiting_max": max((s.get("waiting", 0) for s in ss), default=None),
        "preemptions": delta("preempt"),
        "hit_rate_pct": round(100 * ph / pq, 2) if pq else None,
        "hit_ceiling_64_pct": round(100 * ceil64, 2),
        "hit_ceiling_16_pct": round(100 * ceil16, 2),
        "hit_rate_from_usage_pct": round(
            100 * sum(c[5] for c in cached) / max(1, sum(c[3] for c in cached)), 2
        ),
        "prompt_tok_s": round(pt / dt, 1),
        "computed_prompt_tok_s": round((pt - ph) / dt, 1),
        "generation_tok_s": round(gt / dt, 1),
        "computed_tok_s": round((pt - ph + gt) / dt, 1),
        "effective_tok_s": round((pt + gt) / dt, 1),
        "calls_s": round(len(calls) / dt, 2),
        "records_min": round(60 * len(recs) / dt, 1),
        "calls_per_record": round(sum(r[2] for r in recs) / max(1, len(recs)), 3),
        "prompt_per_call": round(plen / max(1, len(calls)), 1),
        "written_per_call": round(sum(c[4] for c in calls) / max(1, len(calls)), 1),
        "failed_calls": sum(1 for c in calls if not c[6]),
    }


async def reset_prefix_cache(endpoint: str) -> int:
    """Empty the prefix cache (VLLM_SERVER_DEV_MODE=1) on a connection of its own: after a
    level's drain the server may close the pooled keep-alive connections (seen 2026-12-03:
    ServerDisconnectedError ended a run). Returns the status, or -1 after three tries."""
    for _ in range(3):
        try:
            async with (
                aiohttp.ClientSession() as fresh,
                fresh.post(endpoint + "/reset_prefix_cache") as r,
            ):
                return r.status
        except aiohttp.ClientError:
            await asyncio.sleep(1)
    return -1


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True)
    ap.add_argument("--levels", default="1,240,480,960")
    ap.add_argument("--seconds", type=float, default=80.0)
    ap.add_argument("--warm", type=float, default=20.0)
    ap.add_argument("--shared", type=int, default=1330)
    ap.add_argument("--choice", action="store_true")
    ap.add_argument("--max-tokens", type=int, default=0, help="every call (0: the spread)")
    ap.add_argument("--tag", default="seed")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1234)
    prefixes = [[rng.randint(*IDS) for _ in range(a.shared)] for _ in range(3)]
    conn = aiohttp.TCPConnector(limit=0)
    results = []
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=900)
    ) as session:
        for i, n in enumerate(int(x) for x in a.levels.split(",")):
            reset = await reset_prefix_cache(a.endpoint)
            lv = Level(a, n, prefixes, seed=1000 + i)
            samples: list[dict] = []
            stop = asyncio.Event()
            st = asyncio.create_task(sampler(session, a.endpoint, samples, stop))
            t0 = time.time()
            lv.stop_at = t0 + a.seconds
            await asyncio.gather(*(lv.worker(session) for _ in range(n)))
            t_end = time.time()
            await asyncio.sleep(1.5)
            stop.set()
            await st
            summ = window_summary(lv, samples, t0 + a.warm, t0 + a.seconds, a.shared)
            summ.update(
                {
                    "tag": a.tag,
                    "in_flight": n,
                    "reset_prefix_cache": reset,
                    "drain_s": round(t_end - lv.stop_at, 1),
                    "calls_total": len(lv.calls),
                    "records_total": len(lv.records),
                    "errors": lv.errors[:5],
                }
            )
            results.append(summ)
            print(json.dumps(summ), flush=True)
            name = f"{a.tag}-{n}"
            with open(a.out / f"samples-{name}.jsonl", "w") as fh:
                for s in samples:
                    fh.write(json.dumps({**s, "t": round(s["t"] - t0, 2)}) + "\n")
            with open(a.out / f"calls-{name}.jsonl", "w") as fh:
                for c in lv.calls:
                    fh.write(json.dumps([round(c[0] - t0, 3), round(c[1] - t0, 3), *c[2:]]) + "\n")
    (a.out / f"levels-{a.tag}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
