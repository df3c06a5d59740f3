"""The job's own metrics, the Prometheus way: `/metrics` of a running client, and a textfile
for a job that is not running (`sparkops batch metrics DIR --textfile PATH`).

A running client (`batch run --metrics-port PORT`; off by default) serves `GET /metrics` on
127.0.0.1 only, from a prometheus_client registry of its own: the job folder's figures
(jobdir/figures.py, read incrementally at each scrape) with what only the running client
knows laid over them (calls in flight per step, this run's pace and ETA, which endpoints
are stalled now, answers a constraint did not hold in this run). The metrics themselves,
their names and labels: metrics/job_metrics.py. Loopback only: the Spark's Prometheus
scrapes it there, a laptop reaches that Prometheus through an SSH tunnel (docs/watch.md);
the figures carry no record text, but nothing of a job is served beyond the machine.

Its own aiohttp server in the job's event loop, not prometheus_client's HTTP server thread:
a scrape then reads the engine's counters between two of its steps, never while one is
half-updated. The port is bound before the pre-flight sends anything, so a port in use is a
usage error (exit 2) before any request; until the run's folder is open, /metrics answers
503.

For a job that is not running, nothing listens: `sparkops batch metrics DIR` prints the
same figures in the text format, and `--textfile PATH` writes them where node exporter's
textfile collector reads them (`*.prom`, replaced atomically, 0644: the collector runs as
another user, and the figures are counts and names, no record text). A textfile rather than
a short-lived server: the job folder is the truth after the job, node exporter is already
scraped, and a timer (or the job's unit's `ExecStopPost=`) can refresh it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sparkops.errors import UserError
from sparkops.files import WriteFailed, write_atomic
from sparkops.jobdir.figures import FolderFigures
from sparkops.metrics.job_metrics import JobSnapshot, StepFigures, exposition, job_registry

if TYPE_CHECKING:
    from sparkops.batch.engine import Engine
    from sparkops.batch.progress import ProgressView

LOOPBACK = "127.0.0.1"
# node exporter's textfile collector reads only files named *.prom
TEXTFILE_SUFFIX = ".prom"
TEXTFILE_MODE = 0o644


@dataclass(frozen=True)
class LiveFigures:
    """What only the running client knows, at one moment (see the module docstring)."""

    in_flight: Mapping[str, int] = field(default_factory=dict)  # calls per step
    stalled: Mapping[str, bool] = field(default_factory=dict)  # per endpoint, now
    unheld: Mapping[str, int] = field(default_factory=dict)  # this run's, per endpoint
    pace: float | None = None  # records done per second, this run
    eta_s: float | None = None


def live_figures(engine: Engine, view: ProgressView) -> LiveFigures:
    """What the running engine and the progress view know now (read between two steps of the
    event loop, so consistent)."""
    per_min = view.records_per_min()
    return LiveFigures(
        in_flight=dict(engine.in_flight_by_step),
        stalled={ep.name: ep.stalled for ep in engine.pool.endpoints},
        unheld=dict(engine.unheld.counts),
        pace=None if per_min is None else per_min / 60,
        eta_s=view.eta_s(),
    )


def with_live(snap: JobSnapshot, live: LiveFigures) -> JobSnapshot:
    """The folder's snapshot with the running client's figures laid over it: running, calls
    in flight per step (0 for a step with none), the stall state now, this run's unheld
    answers added to the earlier runs' (its own end line is not written yet)."""
    steps = {
        name: dataclasses.replace(figures, in_flight=live.in_flight.get(name, 0))
        for name, figures in snap.steps.items()
    }
    for name, n in live.in_flight.items():
        if name not in steps:
            steps[name] = StepFigures(in_flight=n)
    unheld = dict(snap.unheld)
    for endpoint, n in live.unheld.items():
        unheld[endpoint] = unheld.get(endpoint, 0) + n
    return dataclasses.replace(
        snap,
        running=True,
        steps=steps,
        stalled=dict(live.stalled),
        unheld=unheld,
        pace=live.pace,
        eta_s=live.eta_s,
    )


class MetricsServer:
    """`GET /metrics` on 127.0.0.1:`port` for the running job (see the module docstring)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._source: Callable[[], JobSnapshot] | None = None
        self._registry = job_registry(self._snapshot)
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> MetricsServer:
        """Bind the port (a usage error, exit 2, when it cannot be: before any request)."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, LOOPBACK, self.port).start()
        except OSError as err:
            await self._runner.cleanup()
            raise UserError(
                f"--metrics-port {self.port}: cannot listen on {LOOPBACK}:{self.port} "
                f"({err.strerror}); pass another port, or stop what holds it"
            ) from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def attach(self, directory: Path, live: Callable[[], LiveFigures]) -> None:
        """Serve the job in `directory` (its run open) with the client's `live` figures."""
        figures = FolderFigures(directory)
        self._source = lambda: with_live(figures.refresh().snapshot(), live())

    def _snapshot(self) -> JobSnapshot:
        assert self._source is not None
        return self._source()

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._source is None:
            return web.Response(status=503, text="the job is starting\n")
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def metrics_server(port: int | None) -> AbstractAsyncContextManager[MetricsServer | None]:
    """The job's /metrics server on `port` (bound on entering), or nothing without a port."""
    if port is None:
        return contextlib.nullcontext()
    return MetricsServer(port)


# ---- `sparkops batch metrics DIR [--textfile PATH]` -------------------------------------------
def register_metrics(sub: argparse._SubParsersAction) -> None:
    """`sparkops batch metrics` under `sparkops batch`."""
    metrics = sub.add_parser(
        "metrics",
        help="a job's figures as Prometheus metrics, from its folder",
        description="Print a job's figures in Prometheus' text format (the metrics a "
        "running client serves with --metrics-port), read from its folder; with --textfile, "
        "write them for node exporter's textfile collector instead.",
    )
    metrics.add_argument("dir", type=Path, help="the job folder (batch run's --out)")
    metrics.add_argument(
        "--textfile",
        type=Path,
        metavar="PATH",
        help="write to PATH (a *.prom file in node exporter's --collector.textfile.directory; "
        "replaced atomically) instead of printing (default: print to stdout)",
    )
    metrics.set_defaults(func=_metrics_command)


def _metrics_command(args: argparse.Namespace) -> int:
    if args.textfile is not None:
        _check_textfile(args.textfile)
    data = exposition(FolderFigures(args.dir).refresh().snapshot())
    if args.textfile is None:
        print(data.decode(), end="")
        return 0
    try:
        write_atomic(args.textfile, data, mode=TEXTFILE_MODE)
    except WriteFailed as err:
        raise UserError(f"--textfile {args.textfile}: {err}") from None
    return 0


def _check_textfile(path: Path) -> None:
    """Refused before anything is read: a name the collector skips, a folder that is not
    there."""
    if path.suffix != TEXTFILE_SUFFIX:
        raise UserError(
            f"--textfile {path}: node exporter's textfile collector reads only *.prom files; "
            f"name it {path.with_suffix(TEXTFILE_SUFFIX).name}"
        )
    if not path.parent.is_dir():
        raise UserError(
            f"--textfile {path}: the folder {path.parent} does not exist; pass a file in node "
            "exporter's --collector.textfile.directory (Debian's prometheus-node-exporter: "
            "/var/lib/prometheus/node-exporter)"
        )
