"""What the client asks a vLLM server besides completions: /metrics, /tokenize, /v1/models.

Thin I/O edge; the parsing of the Prometheus text is `sparkops.metrics.scrape`'s job.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from sparkops.metrics.scrape import parse_metrics
from sparkops.metrics.timeline import COUNTERS, GAUGES


def metric_values(text: str) -> dict[str, float]:
    """The timeline values of one /metrics page (only those the server exposed)."""
    snap = parse_metrics(text)
    return {key: float(getattr(snap, key)) for key in (*COUNTERS, *GAUGES) if key in snap.found}


def block_size(text: str) -> int | None:
    """`block_size` label of vllm:cache_config_info (an info gauge scrape.py does not carry)."""
    for family in text_string_to_metric_families(text):
        if family.name.removesuffix("_info") == "vllm:cache_config":
            for sample in family.samples:
                value = sample.labels.get("block_size", "")
                if value.isdigit():
                    return int(value)
    return None


async def get_text(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str | None:
    try:
        async with session.get(url, headers=headers) as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


async def tokenize(
    session: aiohttp.ClientSession,
    base: str,
    model: str,
    messages: list[dict[str, str]],
    headers: dict[str, str],
) -> list[int]:
    """Token ids of a chat prompt exactly as the server will build it (chat template applied)."""
    body = {"model": model, "messages": messages, "add_generation_prompt": True}
    async with session.post(base + "/tokenize", json=body, headers=headers) as resp:
        data = await resp.json(content_type=None)
        if resp.status != 200:
            raise RuntimeError(f"/tokenize answered HTTP {resp.status}: {str(data)[:200]}")
        return list(data["tokens"])


async def served_models(
    session: aiohttp.ClientSession, base: str, headers: dict[str, str]
) -> list[dict[str, Any]]:
    async with session.get(base + "/v1/models", headers=headers) as resp:
        data = await resp.json(content_type=None)
        return list(data.get("data") or [])
