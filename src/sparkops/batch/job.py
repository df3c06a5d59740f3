"""One batch job, end to end: validate, scan, resume, run, sample metrics, summarise.

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
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from sparkops import local_stack, openai_http
from sparkops.batch import checks, lines, serving, serving_record, stall
from sparkops.batch.checks import other_model_message
from sparkops.batch.durable import append_json, write_json_atomic
from sparkops.batch.endpoints import Endpoint, EndpointPool, normalise_base
from sparkops.batch.engine import Engine, EngineConfig, Stats, Stop
from sparkops.batch.jobdir import (
    RESULTS,
    RUNS,
    TIMELINE,
    Manifest,
    check_out_dir,
    drop_errors,
    prepare_dir,
)
from sparkops.batch.journal import Journal
from sparkops.batch.limits import ensure_open_files
from sparkops.batch.lock import lock_job_dir
from sparkops.batch.options import JobConfig
from sparkops.batch.policy import POLICIES
from sparkops.batch.progress import ProgressView
from sparkops.batch.records import (
    InputKind,
    InputScan,
    InputStamp,
    Record,
    check_encoding,
    detect_kind,
    read_records,
    refuse_bad_input,
    scan_input,
)
from sparkops.batch.retry import error_cause
from sparkops.batch.stall import Change
from sparkops.errors import Interrupted, JobStopped, UserError
from sparkops.metrics.timeline import LiveHitRate
from sparkops.pipeline.check import analyse_step, probe_records
from sparkops.pipeline.prompt import build_messages
from sparkops.pipeline.spec import PipelineSpec, load_pipeline
from sparkops.privacy import redact

PREFIX = "prefix.json"
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


class _Signals:
    """SIGINT / SIGTERM during a job: stop the engine (cancel in-flight calls, flush the
    journal) instead of dying mid-write; before the engine runs, cancel the job's task."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.engine: Engine | None = None
        self._task = asyncio.current_task()
        self._installed: list[int] = []

    def __enter__(self) -> _Signals:
        loop = asyncio.get_running_loop()
        for signum in self.SIGNALS:
            try:
                loop.add_signal_handler(signum, self._handle, signum)
            except (ValueError, RuntimeError, NotImplementedError):
                continue  # not the main thread (a library caller): leave signals alone
            self._installed.append(signum)
        return self

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for signum in self._installed:
            loop.remove_signal_handler(signum)

    def _handle(self, signum: int) -> None:
        if self.signum is not None:
            return  # already stopping; the stop is bounded
        self.signum = signum
        if self.engine is not None:
            self.engine.stop(Stop("signal", signal.Signals(signum).name, signum))
        elif self._task is not None:
            self._task.cancel()


def run_job(cfg: JobConfig) -> JobSummary:
    """Run (or resume) a job synchronously; raises UserError on bad input before any request."""
    return asyncio.run(run_job_async(cfg))


def _validate(cfg: JobConfig) -> tuple[PipelineSpec | None, InputKind, str | None]:
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
    return spec, kind, api_key


async def run_job_async(cfg: JobConfig) -> JobSummary:
    """Run (or resume) a job. Raises UserError (exit 2) before any request, JobStopped
    (exit 1) when the job stopped part-way, Interrupted (130/143) on SIGINT/SIGTERM."""
    with _Signals() as signals:
        try:
            return await _run_job(cfg, signals)
        except asyncio.CancelledError:
            if signals.signum is None:
                raise
            name = signal.Signals(signals.signum).name
            raise Interrupted(
                f"interrupted ({name}) before any record was sent; run the same command "
                "again to resume",
                signals.signum,
            ) from None


async def _run_job(cfg: JobConfig, signals: _Signals) -> JobSummary:
    spec, kind, api_key = _validate(cfg)
    stack: dict[str, Any] | None
    if cfg.stack_record:
        stack = serving.read_stack_record(cfg.stack_record)
    else:
        stack = local_stack.find([normalise_base(u) for u in cfg.endpoints])
    scan = scan_input(cfg.input, kind, cfg.id_field, cfg.encoding)
    refuse_bad_input(scan, cfg.input, kind, cfg.id_field)
    if spec is not None:
        _check_first_record(spec, cfg, kind, scan)
    manifest = _manifest(spec, cfg, kind, scan)
    pool = EndpointPool.from_urls(cfg.endpoints, cfg.stall_after, cfg.sample_interval)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as side,
        contextlib.AsyncExitStack() as held,
    ):
        default_model, prefix = await _preflight(
            side, pool, spec, headers, min(PREFLIGHT_TIMEOUT_S, cfg.request_timeout)
        )
        # one run per job directory (a second is refused naming this pid) until the end
        held.enter_context(lock_job_dir(cfg.out))
        resumed = prepare_dir(cfg.out, manifest, cfg.restart)
        if cfg.retry_errors and (n := drop_errors(cfg.out)):
            print(f"sparkops: sending {n} record(s) that ended in error again", file=sys.stderr)
        if prefix is not None:
            _write_json(cfg.out / PREFIX, prefix)
        journal = Journal(cfg.out, "custom_id" if kind == "openai" else "id", cfg.fsync_interval)
        journal.open()
        already = len(journal.done)
        run = 1 + sum(1 for r in lines.run_events(cfg.out / RUNS) if r.event == "start")
        try:
            served = await _record_serving(side, pool, headers, cfg, run, manifest, stack, journal)
        except BaseException:
            journal.close()
            raise
        start = lines.RunEvent(
            "start",
            run,
            time.time(),
            {
                "concurrency": cfg.concurrency,
                "endpoints": len(pool.endpoints),
                "schedule": cfg.policy,
            },
        )
        append_json(cfg.out / RUNS, start.to_json())
        engine = Engine(
            EngineConfig(
                **dict(cfg.engine()), api_key=api_key, run=run, strict_model=cfg.strict_serving
            ),
            pool,
            journal,
            spec,
            POLICIES[cfg.policy],
            default_model,
        )
        signals.engine = engine
        engine.serving = served.epoch
        if spec is not None:  # answers from another model: a serving line and a warning

            def other_model(model: str) -> None:
                served.other_model(run, model, spec.model, journal.done_ok + journal.done_err)
                if not cfg.strict_serving:
                    view.say(other_model_message(model, spec.model, False))

            engine.checks.on_other_model = other_model
        t0 = time.monotonic()
        live = LiveHitRate()
        view = ProgressView(
            engine.stats,
            scan.total,
            already,
            enabled=cfg.progress,
            pool=pool,
            status_interval=cfg.status_interval,
        )
        drift = _Drift(served, engine, view, journal, run, cfg.strict_serving)

        def on_stall_change(change: Change) -> None:  # job log + progress line (batch/stall.py)
            append_json(cfg.out / RUNS, stall.log_event(change, run, time.time()))
            view.note(change)

        pool.on_change = on_stall_change

        def sample() -> Awaitable[None]:  # one /metrics sample of every endpoint, then drift
            return _sample_once(side, pool, headers, cfg, run, engine.stats, live, drift)

        sampler = asyncio.create_task(_sample_loop(sample, cfg.sample_interval, view))
        watch = asyncio.create_task(_watch_input(cfg.input, scan.stamp, engine))
        try:
            with view:
                await engine.run(
                    read_records(cfg.input, kind, cfg.id_field, cfg.encoding, scan.stamp.size)
                )
        finally:
            for task in (sampler, watch):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if engine.stop_reason is None and (change := scan.stamp.change(cfg.input)):
                engine.stop_reason = _input_changed(change)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sample(), FINAL_SAMPLE_S)
            journal.close()
            end = lines.RunEvent("end", run, time.time())
            if engine.stop_reason is not None:
                end.extra["stopped"] = engine.stop_reason.kind
            append_json(cfg.out / RUNS, end.to_json())
    _raise_for_stop(engine.stop_reason, journal)
    return _summary(cfg, scan.total, engine.stats, time.monotonic() - t0, resumed, journal)


def _manifest(
    spec: PipelineSpec | None, cfg: JobConfig, kind: InputKind, scan: InputScan
) -> Manifest:
    """What fixes the job folder to this job: the pipeline, the input as scanned, its id field."""
    return Manifest(
        pipeline_fingerprint=spec.fingerprint() if spec else "openai-batch",
        input_fingerprint=scan.fingerprint,
        input=cfg.input.name,
        kind=kind,
        id_field=cfg.id_field,
        total=scan.total,
        input_size=scan.stamp.size,
        input_mtime_ns=scan.stamp.mtime_ns,
    )


def _raise_for_stop(stop: Stop | None, journal: Journal) -> None:
    """A job that stopped before its input was done ends as an exception (exit 1, resumable)."""
    if stop is not None and stop.kind == "signal":
        assert stop.signum is not None
        raise Interrupted(
            f"interrupted: {journal.done_ok} done, {journal.done_err} errors; run the same "
            "command again to resume",
            stop.signum,
        )
    if stop is not None:
        raise JobStopped(f"stopped: {stop.message}")


def _summary(
    cfg: JobConfig, total: int, st: Stats, elapsed: float, resumed: bool, journal: Journal
) -> JobSummary:
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
        resumed=resumed,
        job_done=journal.done_ok,
        job_errors=journal.done_err,
        causes=_job_causes(cfg.out / RESULTS).most_common() if journal.done_err else [],
    )


def _input_changed(change: str) -> Stop:
    return Stop(
        "input-changed",
        f"{change} while the job ran; the input is fixed for a job: restore it and run the "
        "same command to resume, or pass --restart (or a new --out DIR) to run the new input",
    )


async def _watch_input(path: Path, stamp: InputStamp, engine: Engine) -> None:
    """Stop the job (exit 1, resumable) when its input changes under it: lines appended
    would be records the manifest does not count, a truncated input records that vanish."""
    while True:
        await asyncio.sleep(INPUT_WATCH_S)
        if (change := stamp.change(path)) is not None:
            engine.stop(_input_changed(change))
            return


def _check_first_record(
    spec: PipelineSpec, cfg: JobConfig, kind: InputKind, scan: InputScan
) -> None:
    """A field a step's template names but the first record lacks is the pipeline's or the
    input's mistake, not that record's: one line, exit 2, before any request (otherwise
    every record fails the same way)."""
    first = next(
        (
            item
            for item in read_records(cfg.input, kind, cfg.id_field, cfg.encoding, scan.stamp.size)
            if isinstance(item, Record)
        ),
        None,
    )
    if first is None:
        return
    for step in spec.steps:
        missing = [f for f in step.fields if f not in first.fields]
        if missing:
            fields = ", ".join(first.fields) or "none"
            raise UserError(
                f"step {step.name!r} uses field(s) {missing} that the records of "
                f"{cfg.input} lack (line {first.line} has: {fields}); fix the step's user "
                "template or the input (nothing was sent)"
            )


def _job_causes(path: Path) -> Counter[str]:
    """Every error line of the job (all runs) by cause: what the summary names."""
    causes: Counter[str] = Counter()
    for result in lines.outcomes(path):
        if result.error is not None:
            causes[error_cause(result.error)] += 1
    return causes


async def _preflight(
    side: aiohttp.ClientSession,
    pool: EndpointPool,
    spec: PipelineSpec | None,
    headers: dict[str, str],
    timeout: float = PREFLIGHT_TIMEOUT_S,
) -> tuple[str | None, dict[str, Any] | None]:
    """Check the endpoints serve the model; measure each step's shared prefix for the ceiling.

    Every request here is bounded. /v1/models must answer like an OpenAI server (else one
    line, exit 2). The prefix probes only feed the report's hit-rate ceiling, so a hanging
    or odd /tokenize degrades to "no ceiling" with a note instead of stopping the job.
    """
    base = pool.endpoints[0].base
    default_model = await checks.check_endpoints(  # every endpoint (batch/checks.py)
        side, [ep.base for ep in pool.endpoints], spec.model if spec else None, headers, timeout
    )
    if spec is None:
        return default_model, None
    bs: int | None = None
    steps: dict[str, Any] = {}
    try:
        async with asyncio.timeout(PREFLIGHT_TIMEOUT_S):
            text = await openai_http.get_text(side, pool.endpoints[0].metrics_url, headers)
            bs = openai_http.block_size(text) if text else None
            for step in spec.steps:
                a, b, fixed = probe_records(step)
                toks = [
                    await openai_http.tokenize(
                        side, base, spec.model, build_messages(step, r), headers
                    )
                    for r in (a, b, fixed)
                ]
                p = analyse_step(step, toks[0], toks[1], toks[2], block_size=bs or 16)
                steps[step.name] = {
                    "shared_tokens": p.shared_tokens,
                    "reusable_tokens": p.reusable_tokens,
                    "tail_tokens": p.tail_tokens,
                    "fixed_tokens": p.fixed_tokens,
                }
    except TimeoutError:
        note = f"{base}/tokenize did not answer within {PREFLIGHT_TIMEOUT_S:.0f} s"
    except openai_http.AnswerError as err:
        note = f"{base}{err}"
    except (aiohttp.ClientError, OSError, ValueError) as err:
        note = f"{base}/tokenize failed ({type(err).__name__})"
    else:
        return default_model, {"block_size": bs, "steps": steps}
    note = redact(note)  # it names the endpoint: printed, and kept in prefix.json
    print(
        f"sparkops: warning: {note}; the job runs, but its report has no hit-rate ceiling",
        file=sys.stderr,
    )
    return default_model, {"block_size": bs, "steps": {}, "note": note}


async def _record_serving(
    side: aiohttp.ClientSession,
    pool: EndpointPool,
    headers: dict[str, str],
    cfg: JobConfig,
    run: int,
    manifest: Manifest,
    stack: dict[str, Any] | None,
    journal: Journal,
) -> serving.ServingLog:
    """The run's start line in serving.jsonl: what serves the job now, against what served
    it before (a resumed job); --strict-serving refuses a changed setup before any request."""
    log = serving.ServingLog.load(cfg.out)
    # the GPU check (a second or two of nvidia-smi samples) runs while the endpoints answer
    gpu = asyncio.create_task(asyncio.to_thread(serving.gpu_state, cfg.endpoints))
    try:
        found: dict[str, serving_record.Identity | None] = {}
        problems: dict[str, str] = {}
        for ep in pool.endpoints:
            try:
                found[ep.name] = await serving.probe(side, ep.base, ep.metrics_url, headers)
            except openai_http.NoAnswer as err:
                found[ep.name], problems[ep.name] = None, redact(str(err))
        if cfg.strict_serving and (off := log.off_baseline(found)):
            base, changes = next(iter(off.items()))
            raise JobStopped(serving.strict_message(base, changes, during=False))
        gpu_state = await gpu
    finally:
        gpu.cancel()  # stopped or interrupted: no task left pending (a no-op once done)
    context = serving.job_context(
        manifest.pipeline_fingerprint, manifest.input_fingerprint, gpu_state, stack
    )
    # concurrency above the server's --max-num-seqs: said now, kept for the report
    context["capacity"] = serving_record.capacity(stack, cfg.concurrency, len(pool.endpoints))
    if warning := serving_record.capacity_warning(context["capacity"]):
        print(f"sparkops: warning: {warning}", file=sys.stderr)
    done = journal.done_ok + journal.done_err
    for base, changes in log.write_start(run, found, problems, context, done).items():
        print(
            f"sparkops: warning: {serving.change_sentence(base, changes, log.epoch)}",
            file=sys.stderr,
        )
    return log


@dataclass
class _Drift:
    """Re-checks each endpoint's identity on the metrics samples (batch/serving.py)."""

    log: serving.ServingLog
    engine: Engine
    view: ProgressView
    journal: Journal
    run: int
    strict: bool

    async def check(
        self,
        side: aiohttp.ClientSession,
        ep: Endpoint,
        headers: dict[str, str],
        metrics_text: str | None,
    ) -> None:
        try:
            ident = await serving.probe(side, ep.base, ep.metrics_url, headers, metrics_text)
        except openai_http.NoAnswer:
            return  # down or slow this time: the next sample (or its recovery) checks again
        done = self.journal.done_ok + self.journal.done_err
        changes = self.log.observe(self.run, ep.name, ident, done)
        if not changes:
            return
        self.engine.serving = self.log.epoch
        self.view.say(serving.change_sentence(ep.name, changes, self.log.epoch))
        if self.strict:
            self.engine.stop(
                Stop("serving-changed", serving.strict_message(ep.name, changes, during=True))
            )


async def _sample_once(
    side: aiohttp.ClientSession,
    pool: EndpointPool,
    headers: dict[str, str],
    cfg: JobConfig,
    run: int,
    stats: Stats,
    live: LiveHitRate,
    drift: _Drift | None = None,
) -> None:
    """One /metrics sample of every backend, appended to timeline.jsonl; then each
    endpoint's identity is checked against the serving record (drift)."""
    now = time.time()
    for ep in pool.endpoints:
        text = await openai_http.get_text(side, ep.metrics_url, headers)
        values = _values(text)
        sample = lines.TimelineSample(
            now,
            run,
            ep.name,
            values,
            stats.done + stats.errors,
            stats.in_flight,
            time.process_time(),  # the client's own CPU (metrics/bottleneck.py)
        )
        append_json(cfg.out / TIMELINE, sample.to_json())
        live.add(ep.base, values)
        pool.observe(ep, values)  # the stall watch (the pool's clock): do its counters move?
        if drift is not None:
            await drift.check(side, ep, headers, text if values else None)
    stats.hit_rate = live.rate


def _values(text: str | None) -> dict[str, float]:
    """Timeline values of a /metrics page; a page that does not parse counts as a failed scrape."""
    if not text:
        return {}
    try:
        return openai_http.metric_values(text)
    except ValueError:
        return {}


async def _sample_loop(
    sample: Callable[[], Awaitable[None]], interval: float, view: ProgressView
) -> None:
    """Sample on a clock (constant memory: samples go to disk, the hit rate is a running sum)."""
    last = float("-inf")
    while True:
        if time.monotonic() - last >= interval:  # a wall-clock step must not stop sampling
            last = time.monotonic()
            await sample()
        view.update()
        await asyncio.sleep(0.5)


def _write_json(path: Path, obj: Any) -> None:
    """Job files are replaced atomically (never left empty or truncated by a crash)."""
    write_json_atomic(path, obj)
