"""The serving lines of a job folder (`serving.jsonl`: start, change, other-model) as typed
records, with their writer's `to_json` and the lenient reader `serving_lines`.

Apart from jobdir/lines.py (the other line kinds) because they are the serving record's own:
the client's ServingLog writes them, the report's serving section and `compare` read them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.jobdir.durable import iter_json_lines
from sparkops.jobdir.fields import int_or_zero as _int
from sparkops.jobdir.fields import number_or_none as _number
from sparkops.jobdir.identity import Identity, IdentityChange

# ---- serving lines (serving.jsonl) --------------------------------------------------------------
# Written by batch/serving.py's ServingLog (what each field means is said there); read here by
# the serving log itself, the report's serving section and `compare`.
_SERVING_HEAD = ("event", "t", "run", "serving", "results_from")


@dataclass(slots=True)
class ServingLine:
    """What every serving line has: its time, run, serving epoch and `results_from` (how
    many results lines were written before it)."""

    t: float | None  # None only when read from a line without a time
    run: int
    serving: int | None
    results_from: int | None

    def _head(self, event: str) -> dict[str, Any]:
        return {
            "event": event,
            "t": self.t,
            "run": self.run,
            "serving": self.serving,
            "results_from": self.results_from,
        }

    @staticmethod
    def _read_head(obj: dict[str, Any]) -> tuple[float | None, int, int | None, int | None]:
        serving, since = obj.get("serving"), obj.get("results_from")
        return (
            _number(obj.get("t")),
            _int(obj.get("run")),
            serving if isinstance(serving, int) else None,
            since if isinstance(since, int) else None,
        )


def _changes_of(items: Any) -> list[IdentityChange]:
    """The changes a line lists (an item that is not an object is skipped)."""
    if not isinstance(items, list):
        return []
    return [
        IdentityChange(str(c.get("field")), c.get("before"), c.get("after"))
        for c in items
        if isinstance(c, dict)
    ]


@dataclass(slots=True)
class ServingStart(ServingLine):
    """A run's start: the job's context (kit version, fingerprints, GPU state, stack record,
    capacity; kept in written order), each endpoint's identity or `{"unreachable": why}`, and
    per endpoint what changed since the job's last record (a resumed job)."""

    context: dict[str, Any]
    endpoints: dict[str, dict[str, Any]]
    changes: dict[str, list[IdentityChange]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        obj = {**self._head("start"), **self.context, "endpoints": self.endpoints}
        if self.changes:
            obj["changes"] = {b: [c.as_dict() for c in cs] for b, cs in self.changes.items()}
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ServingStart:
        endpoints = obj.get("endpoints")
        changes = obj.get("changes")
        return cls(
            *cls._read_head(obj),
            {k: v for k, v in obj.items() if k not in (*_SERVING_HEAD, "endpoints", "changes")},
            endpoints if isinstance(endpoints, dict) else {},
            {str(b): _changes_of(cs) for b, cs in changes.items()}
            if isinstance(changes, dict)
            else {},
        )

    def identities(self) -> dict[str, Identity]:
        """The endpoints that answered, with their identities."""
        return {
            b: i
            for b, i in self.endpoints.items()
            if isinstance(i, dict) and "unreachable" not in i
        }

    @property
    def kit_version(self) -> Any:
        return self.context.get("kit_version")

    @property
    def gpu(self) -> Any:
        """`sparkops-gpu-check --json`'s object, or `{"unavailable": why}` (its own format)."""
        return self.context.get("gpu")

    @property
    def stack(self) -> Any:
        """The stack record (sparkops.render.record's format), or None."""
        return self.context.get("stack")

    @property
    def capacity(self) -> dict[str, Any] | None:
        """identity.capacity's record, when --max-num-seqs was known."""
        value = self.context.get("capacity")
        return value if isinstance(value, dict) else None


@dataclass(slots=True)
class ServingChange(ServingLine):
    """An endpoint's identity changed during a run (no changes: an endpoint first seen
    mid-job, its baseline). `identity` is None when a line's is unreadable."""

    endpoint: str
    identity: Identity | None
    changes: list[IdentityChange] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            **self._head("change"),
            "endpoint": self.endpoint,
            "identity": self.identity,
            "changes": [c.as_dict() for c in self.changes],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ServingChange:
        identity = obj.get("identity")
        return cls(
            *cls._read_head(obj),
            str(obj.get("endpoint")),
            identity if isinstance(identity, dict) else None,
            _changes_of(obj.get("changes")),
        )


@dataclass(slots=True)
class OtherModel(ServingLine):
    """An answer named `model`, not the pipeline's `expected` (a router's fallback)."""

    model: str
    expected: str

    def to_json(self) -> dict[str, Any]:
        return {**self._head("other-model"), "model": self.model, "expected": self.expected}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> OtherModel:
        return cls(*cls._read_head(obj), str(obj.get("model")), str(obj.get("expected")))


ServingRecord = ServingStart | ServingChange | OtherModel
_SERVING_KINDS: dict[str, type[ServingStart] | type[ServingChange] | type[OtherModel]] = {
    "start": ServingStart,
    "change": ServingChange,
    "other-model": OtherModel,
}


def serving_lines(path: Path) -> Iterator[ServingRecord]:
    """Every serving line of `path` of a known event, in written order."""
    for obj in iter_json_lines(path):
        kind = _SERVING_KINDS.get(str(obj.get("event")))
        if kind is not None:
            yield kind.from_json(obj)
