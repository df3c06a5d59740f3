"""Ansible filters for reading a running vLLM: where to reach it, and its `/metrics` as numbers.

    {{ vllm_serving_bind_address | default('127.0.0.1', true)
       | sparkops_vllm_url(vllm_serving_port | default(8000)) }}

is the base URL on the host itself: loopback when vLLM is bound to 127.0.0.1 or 0.0.0.0 (or
`::`), else the bind address (a data-parallel replica's private address, where it listens and
loopback does not answer); the same rule as the rendered health check (sparkops.addresses).

    {{ (uri_result.content | default('')) | sparkops_vllm_metrics }}

returns {running, waiting, kv_cache_usage, prompt_tokens, generation_tokens,
prefix_cache_queries, prefix_cache_hits, preemptions, cache_config}. Each number is a float,
or None when the server did not expose that metric (so a missing metric never reads as 0);
counters and the running/waiting gauges are summed over engines, the KV-cache usage (0..1) is
the fullest engine's. `cache_config` holds the labels of `vllm:cache_config_info` (strings,
e.g. prefix_caching_hash_algo, kv_cache_size_tokens; {} when absent).

The numbers come from `sparkops.metrics.scrape.parse_metrics`, the batch client's own parser,
which reads the text with prometheus_client's parser rather than regular expressions (a metric
name can be a textual prefix of another one), so the playbooks and `sparkops batch` agree.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import fields
from pathlib import Path

from ansible.errors import AnsibleFilterError

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
try:
    from prometheus_client.parser import text_string_to_metric_families

    from sparkops.addresses import local_base_url
    from sparkops.metrics.scrape import MetricsSnapshot, parse_metrics
except ImportError as exc:  # pragma: no cover - depends on the controller's environment
    raise AnsibleFilterError(
        f"sparkops_vllm_metrics needs prometheus_client on the controller ({exc}): run "
        "ansible-playbook from the kit's .venv (make venv) or pip install prometheus_client"
    ) from exc

NUMBERS = tuple(f.name for f in fields(MetricsSnapshot) if f.name != "found")
CACHE_CONFIG = "vllm:cache_config_info"


def _cache_config(text: str) -> dict[str, str]:
    for family in text_string_to_metric_families(text):
        if family.name in (CACHE_CONFIG, CACHE_CONFIG.removesuffix("_info")):
            for sample in family.samples:
                return dict(sample.labels)
    return {}


def sparkops_vllm_url(bind_address, port) -> str:
    """Base URL (no trailing slash) of the vLLM bound to `bind_address`:`port`, from its host
    (sparkops.addresses.local_base_url)."""
    try:
        port = int(port)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"sparkops_vllm_url: port {port!r} is not a number") from exc
    return local_base_url(bind_address, port)


def sparkops_vllm_metrics(text) -> dict:
    """Parse vLLM's Prometheus exposition text (see the module docstring)."""
    text = "" if text is None else str(text)
    try:
        snapshot = parse_metrics(text)
        cache_config = _cache_config(text)
    except ValueError as exc:  # prometheus_client's parser on text that is not exposition format
        raise AnsibleFilterError(f"sparkops_vllm_metrics: not Prometheus text ({exc})") from exc
    out: dict = {
        name: (getattr(snapshot, name) if name in snapshot.found else None) for name in NUMBERS
    }
    out["cache_config"] = cache_config
    return out


class FilterModule:
    def filters(self):
        return {
            "sparkops_vllm_metrics": sparkops_vllm_metrics,
            "sparkops_vllm_url": sparkops_vllm_url,
        }
