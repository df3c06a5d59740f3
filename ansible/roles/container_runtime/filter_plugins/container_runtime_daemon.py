"""Ansible filters of container_runtime: read daemon.json, and tell when the engine lags it.

    {{ text | container_runtime_daemon_json }}

parses the text of /etc/docker/daemon.json into {"config": {...}, "error": ""}; a file that is
not a JSON object gives {"config": {}, "error": "<what and where>"} instead of the from_json
traceback, so the role can refuse to overwrite it and say where it breaks.

    {{ info | container_runtime_engine_drift(config, keys, resolved) }}

compares `docker info --format '{{json .}}'` (the running engine's effective settings) with
daemon.json for the option names in `keys` (the ones the role manages) and returns
{"differs": ["log-driver: daemon.json says local, the engine runs json-file", ...],
"unseen": [names docker info does not show]}. A converge stopped between writing daemon.json
and restarting Docker loses the restart handler; this is how the next converge finds out. The
role judges the `unseen` names by daemon.json's modification time against the engine's start.

Path options are compared as Docker means them, not as they are spelt: dockerd resolves
`data-root` through symbolic links and cleans it (`/var/lib/docker/` and a link to
/var/lib/docker both run as /var/lib/docker). `resolved` maps such an option to the path the
host resolved (`realpath -m`, which the role runs there); without it the spelling is cleaned
(trailing and doubled slashes, `.`), so a difference of spelling never restarts Docker.

Plain functions, no Ansible import beyond the registration, so they are unit-tested directly.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from typing import Any

# daemon.json option -> docker info field holding its effective value. Options missing here
# (log-opts, default-address-pools, ...) docker info does not show: they are "unseen".
INFO_FIELDS = {
    "storage-driver": "Driver",
    "log-driver": "LoggingDriver",
    "default-runtime": "DefaultRuntime",
    "runtimes": "Runtimes",
    "live-restore": "LiveRestoreEnabled",
    "data-root": "DockerRootDir",
    "debug": "Debug",
    "labels": "Labels",
    "experimental": "ExperimentalBuild",
    "registry-mirrors": "RegistryConfig",
}
# Options holding a path on the host, which dockerd resolves before it reports them.
PATH_OPTIONS = ("data-root",)


def container_runtime_daemon_json(text: Any) -> dict[str, Any]:
    """daemon.json's text -> {"config": dict, "error": ""}, or the error in words (see above)."""
    text = "" if text is None else str(text)
    if not text.strip():
        return {"config": {}, "error": ""}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"config": {}, "error": f"{exc.msg} at line {exc.lineno}, column {exc.colno}"}
    if not isinstance(config, dict):
        return {"config": {}, "error": f"it holds a JSON {type(config).__name__}, not an object"}
    return {"config": config, "error": ""}


def _running(info: dict[str, Any], key: str) -> Any:
    """The engine's effective value of `key`, in daemon.json's terms."""
    value = info.get(INFO_FIELDS[key])
    if key == "registry-mirrors":
        return [m.rstrip("/") for m in ((value or {}).get("Mirrors") or [])]
    return value


def _wanted(config: dict[str, Any], key: str, resolved: dict[str, Any]) -> Any:
    value = config[key]
    if key == "registry-mirrors":
        return [str(m).rstrip("/") for m in value or []]
    if key in PATH_OPTIONS and isinstance(value, str) and value:
        return str(resolved.get(key) or "") or posixpath.normpath(value)
    return value


def _same(key: str, wanted: Any, running: Any) -> bool:
    if key == "runtimes":  # the engine adds its own (runc, io.containerd.runc.v2)
        return set(wanted or {}) <= set(running or {})
    if key == "labels":
        return sorted(map(str, wanted or [])) == sorted(map(str, running or []))
    if isinstance(wanted, bool) or isinstance(running, bool):
        return bool(wanted) == bool(running)
    if key in PATH_OPTIONS and isinstance(running, str) and running:
        return str(wanted) == posixpath.normpath(running)
    return str(wanted) == str(running)


def _shown(key: str, value: Any) -> str:
    if key == "runtimes":
        return ", ".join(sorted(value or {})) or "none"
    return json.dumps(value) if not isinstance(value, str) else value


def container_runtime_engine_drift(
    info: Any, config: Any, keys: Any, resolved: Any = None
) -> dict[str, list[str]]:
    """Managed options whose running value differs from daemon.json (see the module doc)."""
    info = info if isinstance(info, dict) else {}
    config = config if isinstance(config, dict) else {}
    resolved = resolved if isinstance(resolved, dict) else {}
    differs: list[str] = []
    unseen: list[str] = []
    for key in sorted({str(k) for k in keys or []}):
        if key not in config:
            continue
        if key not in INFO_FIELDS:
            unseen.append(key)
            continue
        wanted, running = _wanted(config, key, resolved), _running(info, key)
        if not _same(key, wanted, running):
            differs.append(
                f"{key}: daemon.json says {_shown(key, config[key])}, "
                f"the engine runs {_shown(key, running)}"
            )
    return {"differs": differs, "unseen": unseen}


class FilterModule:
    """Registers the filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "container_runtime_daemon_json": container_runtime_daemon_json,
            "container_runtime_engine_drift": container_runtime_engine_drift,
        }
