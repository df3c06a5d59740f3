"""Read a vLLM server's Prometheus `/metrics` into one small, frozen snapshot.

The batch client samples every backend on a clock and computes throughput and the prefix-cache
hit rate from differences between snapshots, so this module stays pure (parse text -> numbers)
apart from one thin fetch function. Parsing uses prometheus_client's own text parser rather
than string matching: `vllm:prompt_tokens` is a textual prefix of other metric names
(`vllm:prompt_tokens_cached_total`, ...), which naive matching would wrongly add in.

Counters are summed over every label set (one series per `engine`, i.e. data-parallel rank,
and per `model_name`); the KV-cache usage gauge takes the maximum, since the fullest engine is
the one that evicts shared prefixes first.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from sparkops.urls import api_url, server_root

# Snapshot field -> metric family name as prometheus_client reports it. The parser strips the
# `_total` suffix from counter families (`vllm:prompt_tokens_total` -> family
# `vllm:prompt_tokens`, sample name keeps `_total`); both spellings are accepted below.
COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries",
    "prefix_cache_hits": "vllm:prefix_cache_hits",
    "prompt_tokens": "vllm:prompt_tokens",
    "generation_tokens": "vllm:generation_tokens",
    "preemptions": "vllm:num_preemptions",
}
SUMMED_GAUGES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
}
MAX_GAUGES = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
}


@dataclass(frozen=True)
class MetricsSnapshot:
    """Totals across engines at one moment. Counters are cumulative since server start
    (tokens for the prefix-cache pair); gauges are instantaneous. `found` lists which of the
    fields the server actually exposed, so a missing metric is not mistaken for zero."""

    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    preemptions: float = 0.0
    kv_cache_usage: float = 0.0  # 0..1, maximum over engines
    running: float = 0.0
    waiting: float = 0.0
    found: frozenset[str] = frozenset()


def _family_key(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


_WANTED = {**COUNTERS, **SUMMED_GAUGES, **MAX_GAUGES}
_WANTED_PREFIXES = tuple(sorted(set(_WANTED.values())))
_COMMENTS = ("# HELP ", "# TYPE ")


def wanted_families(text: str) -> str:
    """The lines of the families parse_metrics reads (see `family_lines`)."""
    return family_lines(text, _WANTED_PREFIXES)


def family_lines(text: str, prefixes: tuple[str, ...]) -> str:
    """The lines of the families whose names start with one of `prefixes`, whole (comments
    and samples).

    A vLLM page is mostly histogram buckets nobody here reads; the batch client samples it
    every few seconds during a job, and prometheus_client's parser took about 10 ms a page on
    the H200's host, its largest single cost after the HTTP path (benchmarks/README.md). Every
    line of a family starts with the family's name (after `# HELP ` / `# TYPE `), so keeping
    the lines that start with a wanted name keeps those families whole; a longer name that
    shares the prefix (`vllm:prompt_tokens_cached`) is kept too and left out by the caller. A
    page with none of them (a proxy's HTML, another server's metrics) is passed on whole, so
    the parser still refuses what is not Prometheus text.
    """
    keep = [
        line
        for line in text.splitlines()
        if (line[7:] if line.startswith(_COMMENTS) else line).startswith(prefixes)
    ]
    return "\n".join(keep) + "\n" if keep else text


def info_labels(text: str, name: str) -> dict[str, str]:
    """The labels of the first sample of the info metric `name` (`vllm:cache_config` for
    `vllm:cache_config_info`), {} when the page has none. Only that family's lines are parsed
    (`family_lines`): the job reads vLLM's cache config at every sample.

    Raises ValueError for a page that is not Prometheus text."""
    for family in text_string_to_metric_families(family_lines(text, (name,))):
        if family.name.removesuffix("_info") == name:
            for sample in family.samples:
                return dict(sample.labels)
    return {}


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus exposition text from vLLM's `/metrics` into a MetricsSnapshot."""
    by_family = {_family_key(family): field for field, family in _WANTED.items()}
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(wanted_families(text)):
        field = by_family.get(_family_key(family.name))
        if field is None:
            continue
        for sample in family.samples:
            # Counter families also carry `<name>_created` samples (a timestamp): skip them.
            if sample.name.endswith("_created"):
                continue
            if field in MAX_GAUGES:
                values[field] = max(values.get(field, sample.value), sample.value)
            else:
                values[field] = values.get(field, 0.0) + sample.value
    return MetricsSnapshot(**values, found=frozenset(values))


def fetch_metrics(base_url: str, timeout: float = 5.0) -> MetricsSnapshot:
    """GET `<base_url>/metrics` (a /v1 at the end of base_url dropped, its query string kept
    at the end: sparkops.urls) and parse it."""
    url = api_url(server_root(base_url), "/metrics")
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return parse_metrics(resp.read().decode("utf-8"))


def hit_rate(before: MetricsSnapshot, after: MetricsSnapshot) -> float | None:
    """Prefix-cache hit rate between two snapshots: Δhits / Δqueries (token counts).

    None when nothing was queried in between, or when the counters went down (the server
    restarted between the snapshots, so the difference means nothing)."""
    queries = after.prefix_cache_queries - before.prefix_cache_queries
    hits = after.prefix_cache_hits - before.prefix_cache_hits
    if queries <= 0 or hits < 0:
        return None
    return hits / queries
