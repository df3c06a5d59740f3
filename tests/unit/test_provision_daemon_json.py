"""container_runtime's daemon.json filters: parse errors in words, and the engine's drift.

The role refuses a daemon.json it cannot parse (issue 24, item 22) and restarts Docker when a
killed converge left the engine behind the file for any option it manages (item 12); both are
decided by ansible/roles/container_runtime/filter_plugins/container_runtime_daemon.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PLUGIN = (
    Path(__file__).resolve().parents[2]
    / "ansible/roles/container_runtime/filter_plugins/container_runtime_daemon.py"
)
_spec = importlib.util.spec_from_file_location("container_runtime_daemon", PLUGIN)
assert _spec and _spec.loader
daemon = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(daemon)

# What `docker info --format '{{json .}}'` shows of a 20.10 engine (the fields compared).
INFO = {
    "Driver": "overlay2",
    "LoggingDriver": "json-file",
    "DefaultRuntime": "runc",
    "Runtimes": {"io.containerd.runc.v2": {"path": "runc"}, "runc": {"path": "runc"}},
    "LiveRestoreEnabled": False,
    "DockerRootDir": "/var/lib/docker",
    "Labels": [],
    "RegistryConfig": {"Mirrors": ["https://mirror.invalid/"]},
}


def test_a_malformed_file_is_described_with_its_place() -> None:
    parsed = daemon.container_runtime_daemon_json('{\n  "log-driver": "local",\n}\n')
    assert parsed == {
        "config": {},
        "error": "Expecting property name enclosed in double quotes at line 3, column 1",
    }


def test_an_empty_file_is_no_options_and_a_list_is_refused() -> None:
    assert daemon.container_runtime_daemon_json("  \n") == {"config": {}, "error": ""}
    assert daemon.container_runtime_daemon_json("[]")["error"] == (
        "it holds a JSON list, not an object"
    )
    assert daemon.container_runtime_daemon_json('{"a": {"b": 1}}')["config"] == {"a": {"b": 1}}


def test_drift_names_each_managed_option_the_engine_lacks() -> None:
    config = {
        "log-driver": "local",
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}},
        "storage-driver": "overlay2",
        "log-opts": {"max-size": "10m"},
        "live-restore": True,
    }
    keys = ["log-driver", "runtimes", "storage-driver", "log-opts", "live-restore", "absent"]
    drift = daemon.container_runtime_engine_drift(INFO, config, keys)
    assert drift == {
        "differs": [
            "live-restore: daemon.json says true, the engine runs false",
            "log-driver: daemon.json says local, the engine runs json-file",
            "runtimes: daemon.json says nvidia, the engine runs io.containerd.runc.v2, runc",
        ],
        "unseen": ["log-opts"],
    }


def test_an_engine_that_runs_the_file_has_no_drift() -> None:
    config = {
        "runtimes": {"runc": {"path": "runc"}},
        "registry-mirrors": ["https://mirror.invalid"],
        "data-root": "/var/lib/docker",
        "labels": [],
        "other-key-not-managed": 1,
    }
    drift = daemon.container_runtime_engine_drift(INFO, config, list(config)[:4])
    assert drift == {"differs": [], "unseen": []}


def test_a_path_option_is_compared_as_docker_means_it() -> None:
    """Issue 34 item 1: a trailing slash, a doubled slash or a link is the same data-root."""
    keys = ["data-root"]
    for spelt in ("/var/lib/docker/", "/var/lib//docker", "/var/lib/./docker"):
        assert daemon.container_runtime_engine_drift(INFO, {"data-root": spelt}, keys) == {
            "differs": [],
            "unseen": [],
        }, spelt
    linked = {"data-root": "/srv/docker-link/"}
    # The host resolved the link to the engine's folder: no difference.
    same = daemon.container_runtime_engine_drift(
        INFO, linked, keys, {"data-root": "/var/lib/docker"}
    )
    assert same == {"differs": [], "unseen": []}
    # A real difference is still one, named as daemon.json spells it.
    moved = daemon.container_runtime_engine_drift(
        INFO, linked, keys, {"data-root": "/srv/docker-data"}
    )
    assert moved["differs"] == [
        "data-root: daemon.json says /srv/docker-link/, the engine runs /var/lib/docker"
    ]
