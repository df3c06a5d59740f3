"""Turn one service of a rendered compose.yml into a shell line that runs it without Docker.

The GPU machine has no Docker engine, but the runs must use the kit's rendered files, not
hand-written commands: this reads the service's `command`, `environment`, `env_file` and its
published address (`ports: ADDR:HOST_PORT:CONTAINER_PORT`), and prints an `env ... launcher
command...` line where `--host`/`--port` become the published address, as Docker would
expose it.   python3 compose_argv.py COMPOSE_YML SERVICE LAUNCHER...
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import yaml


def env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def main() -> None:
    compose_path, service, launcher = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    spec = yaml.safe_load(compose_path.read_text())["services"][service]
    env = dict(spec.get("environment") or {})
    for name in spec.get("env_file") or []:
        env.update(env_file(compose_path.parent / name))
    address, host_port, _ = spec["ports"][0].rsplit(":", 2)
    argv = [str(part) for part in spec["command"]]
    for volume in spec.get("volumes") or []:  # a bind-mounted rendered file: its own path
        source, target = str(volume).split(":")[:2]
        if source.startswith("./"):
            local = str((compose_path.parent / source).resolve())
            argv = [local if part == target else part for part in argv]
    for flag, value in (("--host", address), ("--port", host_port)):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    pairs = [f"{key}={shlex.quote(str(value))}" for key, value in env.items()]
    print(" ".join(["env", *pairs, *launcher, *map(shlex.quote, argv)]))


if __name__ == "__main__":
    main()
