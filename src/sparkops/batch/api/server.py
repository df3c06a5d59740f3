"""`sparkops batch serve`: the command, its options, the address and key rules, start and stop.

Where it listens: loopback by default (a researcher's script on the Spark, or an ssh tunnel).
Any other address must be a private one (the private link) and needs `--api-key-env VAR`, the
serving stack's key: every request must then carry it, and the batches send it to the
endpoint, one key for the stack. 0.0.0.0, a public address or a host name is refused with the
fix, before anything listens.

The job options a batch runs with (`--concurrency`, `--request-timeout`, ...) are `batch run`'s
own fields (batch/options.py), declared here from the same schema and handed to every job
as given; one left out keeps `batch run`'s default, so the two cannot drift. They are checked
once at start (`job_config`: the same bounds and messages as `batch run`), never per batch.

Start: the root is locked (one server per root), its batches read back, the unfinished ones
queued (runner.py), then the port opened. SIGTERM or SIGINT: the running job is stopped the
engine's resumable way, and the server exits 0; the next start resumes it.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from sparkops.batch.api.routes import make_app
from sparkops.batch.api.runner import JobCommand, Runner, say
from sparkops.batch.api.store import Store
from sparkops.batch.options import job_config, job_fields
from sparkops.errors import UserError
from sparkops.openai_http import normalise_base

DEFAULT_PORT = 8090
# `batch run`'s options a server hands to every job (the others are per batch or the server's).
JOB_OPTIONS = (
    "concurrency",
    "request_timeout",
    "retry_for",
    "fail_fast",
    "policy",
    "max_wait",
    "stall_after",
    "strict_serving",
    "stack_record",
    "sample_interval",
    "status_interval",
)
EXIT_STATUSES = """\
exit status:
  0    stopped by SIGTERM or SIGINT: the running batch's job was stopped (resumable) and
       the next start on the same --root resumes it
  2    usage or configuration error (an address or key rule, the port taken, the root
       held by another server), before anything listens"""


def register_serve(sub: argparse._SubParsersAction) -> None:
    """`sparkops batch serve` under `sparkops batch`."""
    serve = sub.add_parser(
        "serve",
        help="serve OpenAI's Files and Batches API; every batch is a resumable job folder",
        description="OpenAI's Files and Batches API (files.create, batches.create/retrieve/"
        "list/cancel, files.content) for an unchanged openai script: every batch runs as "
        "`sparkops batch run` on its own job folder under --root, one at a time, and survives "
        "restarts.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--root",
        type=Path,
        required=True,
        metavar="DIR",
        help="the folder holding the server's files and batches (created 0700); starting "
        "again on it resumes its batches",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on: loopback, or a private address (then --api-key-env is "
        "required)",
    )
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on")
    serve.add_argument(
        "--endpoint",
        dest="endpoints",
        action="append",
        required=True,
        metavar="URL",
        help="vLLM or LiteLLM base URL the batches run against (repeatable), as batch run's",
    )
    serve.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the serving stack's API key: every request to "
        "this server must carry it (Authorization: Bearer), and the batches send it to the "
        "endpoint",
    )
    fields = job_fields("run")
    for name in JOB_OPTIONS:
        field, flag = fields[name]
        kwargs: dict[str, Any] = {"dest": name, "default": None}
        if field.annotation is bool:
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = flag.metavar or name.upper()
        help_text = f"{field.description} (default: {_default_words(field.default)}, as batch run)"
        if "default" in str(field.description).lower():
            help_text = f"{field.description}; as batch run"
        serve.add_argument(flag.flag, help=help_text.replace("%", "%%"), **kwargs)
    serve.set_defaults(func=_serve)


def _default_words(default: Any) -> str:
    if default is None:
        return "batch run's own"
    if isinstance(default, bool):
        return "on" if default else "off"
    return f"{default:g}" if isinstance(default, float) else str(default)


@dataclass(frozen=True)
class ServeConfig:
    root: Path
    host: str
    port: int
    command: JobCommand
    api_key: str | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeConfig:
        """Checked before anything is created or listens (UserError, exit 2)."""
        endpoints = tuple(args.endpoints)
        for url in endpoints:
            normalise_base(url)  # http(s) and no API route, with the fix
        given = {n: getattr(args, n) for n in JOB_OPTIONS if getattr(args, n) not in (None, False)}
        # the job's own checks of these settings, once here (placeholder input and out)
        job_config(
            input=Path("batch.jsonl"),
            out=Path("job"),
            endpoints=list(endpoints),
            api_key_env=args.api_key_env,
            **given,
        )
        if given.get("stack_record") and not Path(given["stack_record"]).is_file():
            raise UserError(
                f"--stack-record {given['stack_record']} is not a file; pass the deploy's "
                "stack-record.json, or leave the option out"
            )
        options: list[str] = []
        for name, value in given.items():
            flag = job_fields("run")[name][1].flag
            options += [flag] if value is True else [flag, str(value)]
        api_key = _api_key(args.api_key_env)
        check_address(args.host, api_key is not None)
        if not 0 < args.port < 65536:
            raise UserError(f"--port {args.port} is not a port; pass one from 1 to 65535")
        return cls(
            root=args.root.absolute(),
            host=args.host,
            port=args.port,
            command=JobCommand(endpoints, args.api_key_env, tuple(options)),
            api_key=api_key,
        )


def _api_key(env: str | None) -> str | None:
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise UserError(
            f"environment variable {env} is empty or unset; export the serving stack's API "
            "key in it (the server requires it of every request and sends it to the endpoint)"
        )
    return key


def check_address(host: str, has_key: bool) -> None:
    """Loopback; or a private address with the key required. Anything else is refused."""
    if host == "localhost":
        return
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise UserError(
            f"--host {host} is not an IP address; give 127.0.0.1 (the default) or the "
            "private link's address"
        ) from None
    if address.is_loopback:
        return
    if address.is_unspecified:
        raise UserError(
            f"--host {host} listens on every address, public ones too; give 127.0.0.1 or "
            "the private link's address (with --api-key-env)"
        )
    if not address.is_private:
        raise UserError(
            f"--host {host} is a public address; the batch server listens on loopback or a "
            "private address only (reach it from elsewhere through an ssh tunnel)"
        )
    if not has_key:
        raise UserError(
            f"--host {host} can be reached from other machines; pass --api-key-env VAR with "
            "the serving stack's API key, so every request must carry it"
        )


def _serve(args: argparse.Namespace) -> int:
    config = ServeConfig.from_args(args)
    return asyncio.run(serve(config))


async def serve(config: ServeConfig) -> int:
    """Run the server until SIGTERM or SIGINT; 0 once the running job stopped resumably."""
    store = Store.open(config.root)
    try:
        runner = Runner(store, config.command)
        runner.load()
        site_runner = web.AppRunner(
            make_app(store, runner, config.api_key),
            handle_signals=False,
            access_log=None,
            shutdown_timeout=5.0,
        )
        await site_runner.setup()
        try:
            await _listen(site_runner, config)
            stop = _stop_on_signals()
            runner.start()
            queued = sum(1 for s in runner.batches.values() if not s.terminal)
            say(
                f"batch serve: OpenAI's Batch API on http://{_host(config.host)}:{config.port}/v1"
                f", root {config.root}; {len(runner.batches)} batch(es), {queued} to finish"
            )
            await stop.wait()
            say("batch serve: stopping; a running batch resumes on the next start")
            await runner.stop()
        finally:
            await site_runner.cleanup()
    finally:
        store.close()
    return 0


async def _listen(site_runner: web.AppRunner, config: ServeConfig) -> None:
    try:
        await web.TCPSite(site_runner, config.host, config.port).start()
    except OSError as err:
        raise UserError(
            f"cannot listen on {config.host}:{config.port} ({err.strerror}); pass another "
            "--port, or stop what holds it"
        ) from None


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN:
            continue  # nohup: a hang-up must not stop the server
        loop.add_signal_handler(signum, stop.set)
    return stop


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
