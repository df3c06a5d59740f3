"""What served a job (pure core): an endpoint's identity from its raw answers, and drift.

Users report figures they cannot reproduce (239 vs 71 tok/s) and accuracy that moved between
runs because the server under a job changed: another model, another max length, another vLLM,
another cache configuration. A job therefore records, per endpoint, an *identity* built from
what the server itself says (`/version`, `/v1/models`, `vllm:cache_config_info` on
`/metrics`), compares it on every metrics sample, and marks the boundary when it changes.

An identity is a flat `{field: text}` mapping (diffable, printable, stable on disk):
  version         vLLM's `/version` ("" when the server has none: LiteLLM, a proxy)
  model           the served model ids, comma-separated
  max_model_len   per served model, comma-separated ("" when not reported)
  root            the weights each model was loaded from (vLLM's `root`)
  cache.<label>   every label of `vllm:cache_config_info` (block_size, cache_dtype,
                  num_gpu_blocks, prefix_caching_hash_algo, ... whatever the version exposes)

Nothing here reads a record: the serving record holds server facts, never patient data.
The I/O edges are `sparkops.openai_http` (the requests) and `batch.serving` (the job's file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkops.metrics.scrape import info_labels

# The capacity rule (concurrency against --max-num-seqs) lives in sparkops.vocabulary, where
# the preflight filter reads it too; re-exported for the serving record's writer.
from sparkops.vocabulary import capacity as capacity
from sparkops.vocabulary import capacity_warning as capacity_warning
from sparkops.vocabulary import max_num_seqs as max_num_seqs

Identity = dict[str, str]

# Labels of vllm:cache_config_info that name the scrape, not the engine's configuration.
_NOT_CONFIG = {"engine", "model_name"}
# Fields worth naming first when an identity changes (the rest follow alphabetically).
_ORDER = ("model", "max_model_len", "version", "root")


@dataclass(frozen=True)
class IdentityChange:
    """One field of an endpoint's identity that differs between two records."""

    field: str
    before: str | None  # None: the field was absent
    after: str | None

    def text(self) -> str:
        return f"{self.field} {_shown(self.before)} -> {_shown(self.after)}"

    def as_dict(self) -> dict[str, str | None]:
        return {"field": self.field, "before": self.before, "after": self.after}


def cache_config(metrics_text: str) -> dict[str, str]:
    """The labels of `vllm:cache_config_info` (the first engine's), {} when absent.

    Raises ValueError for a page that is not Prometheus text (the caller treats the scrape
    as failed, not as "no cache config": a failed scrape must not look like drift).
    """
    labels = info_labels(metrics_text, "vllm:cache_config")
    return {k: v for k, v in sorted(labels.items()) if k not in _NOT_CONFIG}


def models_identity(models_answer: Any) -> dict[str, str]:
    """model, max_model_len and root from a `/v1/models` answer (an OpenAI model list).

    Raises ValueError when the answer is not a model list (a proxy's page).
    """
    data = models_answer.get("data") if isinstance(models_answer, dict) else None
    if not isinstance(data, list) or not all(
        isinstance(m, dict) and isinstance(m.get("id"), str) for m in data
    ):
        raise ValueError("not an OpenAI model list")
    models = sorted(data, key=lambda m: m["id"])
    return {
        "model": ", ".join(m["id"] for m in models),
        "max_model_len": ", ".join(_text(m.get("max_model_len")) for m in models),
        "root": ", ".join(_text(m.get("root")) for m in models),
    }


def version_text(version_answer: Any) -> str:
    """vLLM's `/version` answer ({"version": "0.11.0"}) as text; "" for anything else."""
    if isinstance(version_answer, dict) and isinstance(version_answer.get("version"), str):
        return version_answer["version"]
    return ""


def build_identity(
    version_answer: Any, models_answer: Any, cache: Mapping[str, str] | None
) -> Identity:
    """An endpoint's identity from its three raw answers (see the module docstring).

    `version_answer` None means the server has no /version (404): recorded as "". `cache`
    None means /metrics has no cache_config_info (not vLLM): no cache.* fields.
    """
    ident: Identity = {"version": version_text(version_answer)}
    ident.update(models_identity(models_answer))
    for key, value in (cache or {}).items():
        ident[f"cache.{key}"] = str(value)
    return ident


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[IdentityChange]:
    """Every field that differs (absent fields count), the important ones first."""
    keys = set(before) | set(after)
    changes = [
        IdentityChange(k, _opt(before.get(k)), _opt(after.get(k)))
        for k in keys
        if _opt(before.get(k)) != _opt(after.get(k))
    ]
    return sorted(changes, key=_rank)


def describe(changes: Iterable[IdentityChange], limit: int = 4) -> str:
    """One short phrase for a progress line or an error: "model a -> b, version x -> y"."""
    items = list(changes)
    text = ", ".join(c.text() for c in items[:limit])
    if len(items) > limit:
        text += f" and {len(items) - limit} more"
    return text


def _rank(change: IdentityChange) -> tuple[int, str]:
    field = change.field
    return (_ORDER.index(field) if field in _ORDER else len(_ORDER), field)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def _shown(value: str | None) -> str:
    if value is None:
        return "(absent)"
    return value if value != "" else "(none)"
