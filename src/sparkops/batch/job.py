"""One batch job, end to end: validate, scan, resume, run, sample metrics, summarise.

The job asks its servers before the first record through batch/preflight.py, samples them
while it runs through batch/sampler.py, and hands the records to the engine with the
workload (batch/workload.py) the input and --pipeline chose.

`run_job(config)` is the library entry point (synchronous; it runs its own event loop)
used by `sparkops batch run` and by the concurrency sweep, which calls it once per level
with a fresh `out` directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from sparkops import local_stack
from sparkops.batch import collector, exporter, serving, stall
from sparkops.batch.endpoints import EndpointPool, normalise_base
from sparkops.batch.engine import Engine, EngineConfig, Stats, Stop
from sparkops.batch.hooks import RunHooks, Stopper
from sparkops.batch.limits import ensure_open_files
from sparkops.batch.options import JobConfig
from sparkops.batch.policy import POLICIES
from sparkops.batch.preflight import preflight
from sparkops.batch.progress import ProgressView
from sparkops.batch.records import InputKind, InputSource, check_encoding, detect_kind
from sparkops.batch.sampler import Sampler
from sparkops.batch.serving import ServingLog, ServingWatch
from sparkops.batch.signals import JobSignals
from sparkops.batch.stall import StallChange
from sparkops.batch.workload import Workload, workload_for
from sparkops.errors import Interrupted, JobStopped, UserError
from sparkops.jobdir import digest, lines
from sparkops.jobdir.folder import Manifest, check_out_dir
from sparkops.jobdir.journal import Journal
from sparkops.jobdir.run import JobRun
from sparkops.jobdir.status import error_causes
from sparkops.methods.saved import copy_problem, pipeline_source
from sparkops.openai_http import ServerClient, auth_headers
from sparkops.pipeline.spec import load_pipeline
from sparkops.privacy import redact

# The preflight's own requests are bounded: /v1/models must answer within this, and the
# prefix probes (/tokenize, optional) share this budget, then the job runs without them.
PREFLIGHT_TIMEOUT_S = 30.0
# How often a running job checks that its input is unchanged (one stat).
INPUT_WATCH_S = 0.5


@dataclass
class JobSummary:
    """What one call of run_job did (the report has the whole-job figures)."""

    out: Path
    total: int
    done: int
    errors: int
    skipped: int
    calls: int
    retries: int
    elapsed_s: float
    records_per_min: float | None
    hit_rate: float | None
    resumed: bool
    extra: dict[str, Any] = field(default_factory=dict)
    job_done: int = 0  # the whole job's finished records (every run), from the journal
    job_errors: int = 0
    causes: list[tuple[str, int]] = field(default_factory=list)  # the job's errors, commonest first

    @property
    def exit_status(self) -> int:
        """0 every record done; 3 finished, but some records are errors (see `causes`)."""
        return 3 if self.job_errors else 0


# How long the last /metrics sample may take once the job is over (a hung server must not
# hold the exit, Ctrl-C included).
FINAL_SAMPLE_S = 5.0


def run_job(cfg: JobConfig) -> JobSummary:
    """Run (or resume) a job synchronously; raises UserError on bad input before any request."""
    return asyncio.run(run_job_async(cfg))


def _validate(cfg: JobConfig) -> tuple[Workload, InputKind, str | None]:
    if not cfg.endpoints:
        raise UserError("no endpoint given; pass --endpoint http://127.0.0.1:8000 (repeatable)")
    # Types and bounds of every setting are JobConfig's (batch/options.py), checked when built.
    for url in cfg.endpoints:
        normalise_base(url)  # refuses a URL without http:// with the fix
    check_out_dir(cfg.out)
    ensure_open_files(cfg.concurrency, len(cfg.endpoints))
    api_key = None
    if cfg.api_key_env:
        api_key = os.environ.get(cfg.api_key_env)
        if not api_key:
            raise UserError(
                f"environment variable {cfg.api_key_env} is empty or unset; "
                "export the API key in it"
            )
    if not cfg.input.is_file():
        raise UserError(
            f"input {cfg.input} does not exist; pass --input with a JSONL, CSV or OpenAI batch file"
        )
    kind = detect_kind(cfg.input, check_encoding(cfg.encoding))
    if kind == "openai" and cfg.pipeline is not None:
        raise UserError(
            f"{cfg.input} is an OpenAI batch file (each line is a whole request), so "
            "--pipeline does not apply; drop --pipeline, or pass records (JSONL with an id "
            "field, or CSV) to run them through the pipeline"
        )
    spec = load_pipeline(cfg.pipeline) if cfg.pipeline else None
    if spec is None and kind != "openai":
        raise UserError(
            f"{cfg.input} holds records, not OpenAI batch requests; pass --pipeline P.yaml"
        )
    return workload_for(kind, spec), kind, api_key


async def run_job_async(cfg: JobConfig) -> JobSummary:
    """Run (or resume) a job. Raises UserError (exit 2) before any request, JobStopped
    (exit 1) when the job stopped part-way, Interrupted (130/143) on SIGINT/SIGTERM."""
    stopper = Stopper()  # the run's stop: the signal handlers' and, later, the run hooks'
    with JobSignals(stopper) as signals, collector.tuned_for_job():
        try:
            return await _run_job(cfg, stopper)
        except asyncio.CancelledError:
            if signals.signum is None:
                raise
            name = signal.Signals(signals.signum).name
            if signals.signum == signal.SIGHUP:
                raise JobStopped(hangup_message("before any record was sent")) from None
            raise Interrupted(
                f"interrupted ({name}) before any record was sent; run the same command "
                "again to resume",
                signals.signum,
            ) from None


async def _run_job(cfg: JobConfig, stopper: Stopper) -> JobSummary:
    workload, kind, api_key = _validate(cfg)
    bases = [normalise_base(u) for u in cfg.endpoints]
    stack: dict[str, Any] | None
    if cfg.stack_record:
        stack = serving.read_stack_record(cfg.stack_record)
    else:
        stack = local_stack.find(bases)
    source = InputSource.scan(cfg.input, kind, cfg.id_field, cfg.encoding)
    # A first record the workload cannot send (a field a step's template names but it lacks)
    # is the job's or the input's mistake, not that record's: one line, exit 2, before any
    # request (otherwise every record fails the same way).
    if (first := source.first_record()) is not None:
        workload.check_first(first, cfg.input)
    manifest = _manifest(workload, cfg, source)
    # the pipeline's files as read now: the job folder keeps a copy (methods/saved.py)
    pipeline = pipeline_source(cfg.pipeline) if cfg.pipeline else None
    # the job's own /metrics (--metrics-port): bound before any request, a port in use is exit 2
    async with (
        exporter.metrics_server(cfg.metrics_port) as metrics,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
    ):
        # the side client: pre-flight, serving record, samples (the preflight's bound)
        side = ServerClient(
            session, auth_headers(api_key), min(PREFLIGHT_TIMEOUT_S, cfg.request_timeout)
        )
        default_model, prefix = await preflight(side, bases, workload, budget=PREFLIGHT_TIMEOUT_S)
        # one run per job directory (a second is refused naming this pid) until the end
        with JobRun.open(
            cfg.out,
            manifest,
            key_field=workload.journal_key,
            restart=cfg.restart,
            retry_errors=cfg.retry_errors,
            prefix=prefix,
            fsync_interval=cfg.fsync_interval,
            pipeline=pipeline,
        ) as job:
            if pipeline is not None and (
                kept := job.copy_warning or copy_problem(cfg.out, manifest)
            ):
                print(f"sparkops: warning: {kept}", file=sys.stderr)
            if job.retried:
                print(
                    f"sparkops: sending {job.retried} record(s) that ended in error again",
                    file=sys.stderr,
                )
            if job.journal.damage:  # said once, before the resume: the lines stay as they are
                print(f"sparkops: warning: {job.journal.damage.sentence()}", file=sys.stderr)
            log = await serving.start(side, bases, cfg, job, manifest, stack)
            start = {
                "concurrency": cfg.concurrency,
                "endpoints": len(bases),
                "schedule": cfg.policy,
            }
            run_started = time.monotonic()  # the end line's active_s: a span no clock step moves
            job.log(lines.RunEvent("start", job.number, time.time(), start))
            stats = Stats()
            view = ProgressView(
                stats,
                source.total,
                len(job.journal.done),
                enabled=cfg.progress,
                endpoints=[redact(base) for base in bases],
                status_interval=cfg.status_interval,
            )
            hooks = _run_hooks(stopper, job, log, view)
            pool = EndpointPool.from_urls(
                cfg.endpoints, cfg.stall_after, cfg.sample_interval, hooks
            )
            engine = Engine(
                EngineConfig(
                    **dict(cfg.engine()),
                    api_key=api_key,
                    run=job.number,
                    strict_model=cfg.strict_serving,
                ),
                pool,
                job.journal,
                workload,
                POLICIES[cfg.policy],
                default_model,
                hooks=hooks,
                stats=stats,
            )
            t0 = time.monotonic()
            watch = ServingWatch(side, log, job, cfg.strict_serving, hooks)
            sampler = Sampler(side, pool, job, stats, hooks, watch)
            if metrics is not None:  # served from the folder, with the run's live figures
                metrics.attach(job.directory, lambda: exporter.live_figures(engine, view))
            stop = await _run_engine(cfg, job, engine, source, sampler, view, run_started)
    _raise_for_stop(stop, job.journal)
    return _summary(cfg, source.total, stats, time.monotonic() - t0, job)


def _run_hooks(stopper: Stopper, job: JobRun, log: ServingLog, view: ProgressView) -> RunHooks:
    """The run's hooks (batch/hooks.py), built once: the progress line says and refreshes,
    a stall change goes to the job log and the progress line, the serving record gives the
    epoch and keeps answers from another model."""

    def note(change: StallChange) -> None:  # job log + progress (batch/stall.py)
        job.log(stall.run_event(change, job.number, time.time()))
        view.note(change)

    def other_model(model: str, expected: str) -> None:
        log.other_model(job.number, model, expected, job.finished)

    return RunHooks(
        stopper,
        say=view.say,
        note=note,
        refresh=view.update,
        epoch=lambda: log.epoch,
        other_model=other_model,
    )


async def _run_engine(
    cfg: JobConfig,
    job: JobRun,
    engine: Engine,
    source: InputSource,
    sampler: Sampler,
    view: ProgressView,
    run_started: float,
) -> Stop | None:
    """The run proper: the engine over the input, with the progress line, the sampler and
    the input watch beside it; the run's end line, however it ends. Returns why it stopped
    early (None: its input is done)."""
    sampling = asyncio.create_task(sampler.loop(cfg.sample_interval))
    watching = asyncio.create_task(_watch_input(source, engine))
    stop: Stop | None = None
    try:
        with view:
            await engine.run(source.records())
    finally:
        for task in (sampling, watching):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        stop = engine.stop_reason
        if stop is None and (change := source.changed()):
            stop = _input_changed(change)  # after the run: its stop no longer listens
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(sampler.once(), FINAL_SAMPLE_S)
        if stop is None:  # a stopped run (a full disk) has said why: no second line about it
            with contextlib.suppress(TimeoutError):  # host.jsonl is unsealed: late is no edit
                await asyncio.wait_for(sampler.read_host(final=True), FINAL_SAMPLE_S)
        job.journal.close()
        end = lines.RunEvent("end", job.number, time.time())
        if stop is not None:
            end.extra["stopped"] = stop.kind
        if engine.fates.last_finish is not None:
            end.extra["active_s"] = round(engine.fates.last_finish - run_started, 3)
        if engine.unheld.counts:  # answers sent again: the constraint did not hold
            end.extra["unheld"] = dict(engine.unheld.counts)
        end.extra[digest.DIGESTS] = digest.seal(job.directory)  # the files, sealed (issue 40)
        job.log(end)
    return stop


def hangup_message(progress: str) -> str:
    """SIGHUP's one line (exit 1, resumable): the terminal went away, here is how to go on."""
    return (
        f"stopped: the terminal hung up (SIGHUP: a dropped ssh session?); {progress}; run the "
        "same command again to resume (under tmux, nohup or the job's systemd unit a dropped "
        "session does not stop it)"
    )


def _manifest(workload: Workload, cfg: JobConfig, source: InputSource) -> Manifest:
    """What fixes the job folder to this job: the pipeline, the input as scanned, its id field."""
    return Manifest(
        pipeline_fingerprint=workload.fingerprint(),
        input_fingerprint=source.scan_result.fingerprint,
        input=cfg.input.name,
        kind=source.kind,
        id_field=cfg.id_field,
        total=source.total,
        input_size=source.stamp.size,
        input_mtime_ns=source.stamp.mtime_ns,
        constraints=workload.constraints,
    )


def _raise_for_stop(stop: Stop | None, journal: Journal) -> None:
    """A job that stopped before its input was done ends as an exception (exit 1, resumable)."""
    if stop is not None and stop.kind == "signal" and stop.signum == signal.SIGHUP:
        raise JobStopped(hangup_message(f"{journal.done_ok} done, {journal.done_err} errors"))
    if stop is not None and stop.kind == "signal":
        assert stop.signum is not None
        raise Interrupted(
            f"interrupted: {journal.done_ok} done, {journal.done_err} errors; run the same "
            "command again to resume",
            stop.signum,
        )
    if stop is not None:
        raise JobStopped(f"stopped: {stop.message}")


def _summary(cfg: JobConfig, total: int, st: Stats, elapsed: float, job: JobRun) -> JobSummary:
    """The finished run in figures; records/min counts records done, not errors."""
    return JobSummary(
        out=cfg.out,
        total=total,
        done=st.done,
        errors=st.errors,
        skipped=st.skipped,
        calls=st.calls,
        retries=st.retries,
        elapsed_s=elapsed,
        records_per_min=st.done / elapsed * 60 if elapsed > 0 and st.done else None,
        hit_rate=st.hit_rate,
        resumed=job.resumed,
        job_done=job.journal.done_ok,
        job_errors=job.journal.done_err,
        causes=error_causes(cfg.out).most_common() if job.journal.done_err else [],
    )


def _input_changed(change: str) -> Stop:
    return Stop(
        "input-changed",
        f"{change} while the job ran; the input is fixed for a job: restore it and run the "
        "same command to resume, or pass --restart (or a new --out DIR) to run the new input",
    )


async def _watch_input(source: InputSource, engine: Engine) -> None:
    """Stop the job (exit 1, resumable) when its input changes under it: lines appended
    would be records the manifest does not count, a truncated input records that vanish."""
    while True:
        await asyncio.sleep(INPUT_WATCH_S)
        if (change := source.changed()) is not None:
            engine.stop(_input_changed(change))
            return
