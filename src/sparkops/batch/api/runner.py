"""The queue: batches run one at a time, oldest first, each as a `sparkops batch run` child.

One at a time: a job keeps `--concurrency` requests in flight, sized to what the serving
stack holds; two jobs at once would split that (or overload the server) and each would take
as long as the two together, so a queue finishes the first batch sooner and the last no later.
Queued batches show `in_progress` with `in_progress_at` still null until their job starts.

A child process, the same command a shell runs: the job is `sparkops batch run --input
BATCH/input.jsonl --out BATCH/job` (same engine, journal, retries, stall rules, serving record
and exit statuses), its signals are its own (SIGTERM is the engine's resumable stop: calls in
flight cancelled, the journal flushed), and a crash in a job is that batch's, not the
server's. The child runs in its own session (a Ctrl-C at the server's terminal reaches the
server, which stops the child), and the kernel sends it SIGTERM if the server dies, however
it dies (PR_SET_PDEATHSIG), so a killed server leaves no job running on.

How a batch ends, by the child's exit status: 0 or 3 (finished, some requests may be errors)
-> finalizing -> completed; a cancel -> cancelled; the server stopping -> still in_progress,
resumed on the next start (the journal is exactly-once); an interrupt the server did not send
(130, 143) -> resumed after a pause; 1 (stopped: the endpoint gone past --retry-for, every
endpoint stalled, a full disk) or 2 (refused: a model the endpoint does not serve, a wrong key)
-> failed, its `errors` quoting the job's own line. Every end but "resumed" writes the output
and error files of what finished (outputs.py), so a cancelled or failed batch keeps its lines.

Before a job starts, the runner waits for the job folder's lock (a job left by a killed server
is still stopping) and for every endpoint to answer /v1/models (after a reboot the server may
come up before vLLM), so neither fails a batch that only had to wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from sparkops.batch.api.objects import ApiError, BatchErrorItem, BatchState
from sparkops.batch.api.outputs import ResultCounts, split_results
from sparkops.batch.api.store import Store, output_file_ids
from sparkops.errors import UserError
from sparkops.files import open_private
from sparkops.jobdir.folder import RESULTS, lock_holder
from sparkops.openai_http import normalise_base
from sparkops.privacy import redact
from sparkops.urls import api_url

# Seconds before trying again: a finish that could not be written, an interrupted job.
RETRY_S = 30.0
# Seconds between two looks at a job folder's lock or the endpoints while a batch waits.
POLL_S = 0.5
ENDPOINT_POLL_S = 5.0
ENDPOINT_TIMEOUT_S = 10.0
# How long a stopping job gets before it is killed (its stop is bounded: calls cancelled, the
# journal flushed; this only ends a child that hangs).
STOP_S = 120.0
# Exit statuses of an interrupted job: SIGINT, SIGTERM (the CLI's, or the signal's own).
INTERRUPTED = frozenset({130, 143, -signal.SIGINT, -signal.SIGTERM})
ERROR_CODES = {1: "job_stopped", 2: "job_refused"}
CRASH_LOG = "crash.log"

PR_SET_PDEATHSIG = 1
# prctl, looked up once here: a forked child must call it, never load a library.
_PRCTL: Any = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def _bound_to(server_pid: int) -> Callable[[], None]:
    """The child's first act (preexec_fn): have the kernel send it SIGTERM when the server
    dies, and stop at once if the server died before that."""

    def bind() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != server_pid:
            os._exit(143)

    return bind


def _now() -> int:
    return int(time.time())


def say(message: str) -> None:
    """One line on stderr (journald under systemd): ids, counts and causes, never records."""
    print(f"sparkops: {redact(message)}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class JobCommand:
    """How every batch's job is run: the endpoints, the key's variable, the job options."""

    endpoints: tuple[str, ...]
    api_key_env: str | None = None
    options: tuple[str, ...] = ()

    def argv(self, input_path: Path, out: Path) -> list[str]:
        urls = [arg for url in self.endpoints for arg in ("--endpoint", url)]
        key = ["--api-key-env", self.api_key_env] if self.api_key_env else []
        return [
            *(sys.executable, "-m", "sparkops.cli", "batch", "run"),
            *("--input", str(input_path), "--out", str(out), "--no-progress"),
            *urls,
            *key,
            *self.options,
        ]

    def headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}


class Runner:
    """Every batch of the root (`batches`), and the one worker that runs them in turn."""

    def __init__(
        self, store: Store, command: JobCommand, tell: Callable[[str], None] = say
    ) -> None:
        self.store = store
        self.command = command
        self.say = tell
        self.batches: dict[str, BatchState] = {}
        self._counts: dict[str, ResultCounts] = {}
        self._count_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._current: str | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._side: set[asyncio.Task[None]] = set()

    # ---- the server's side ------------------------------------------------------------------
    def load(self) -> None:
        """Read the root's batches: in_progress and finalizing ones go back in the queue,
        cancelling ones are finished as cancelled once `start` runs."""
        self.batches = {state.id: state for state in self.store.load_batches()}

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())
        for state in self.batches.values():
            if state.status == "cancelling":
                self._finish_later(state)

    async def stop(self) -> None:
        """Stop the running job (resumable: the batch stays in_progress) and the worker."""
        self._stopped.set()
        self._wake.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        tasks = [t for t in (self._task, *self._side) if t is not None]
        for task in tasks:
            if task is not self._task:
                task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def add(self, state: BatchState) -> None:
        """A new batch, written to disk first, then queued."""
        self.store.save_batch(state)
        self.batches[state.id] = state
        self._wake.set()

    def newest_first(self) -> list[BatchState]:
        return sorted(self.batches.values(), key=lambda s: (s.created_ns, s.id), reverse=True)

    async def counts(self, state: BatchState) -> tuple[int, int]:
        """(succeeded, failed) requests so far: final once the batch ended, else read from its
        job's results as they grow."""
        if state.terminal:
            return state.completed, state.failed
        counter = self._counts.setdefault(
            state.id, ResultCounts(self.store.job_dir(state.id) / RESULTS)
        )
        async with self._count_lock:
            return await asyncio.to_thread(counter.update)

    def cancel(self, state: BatchState) -> None:
        """Cancel a batch: a running job gets SIGTERM (the engine's resumable stop), a queued
        batch ends at once; either ends `cancelled` with the lines it finished."""
        if state.status == "cancelling":
            return
        if state.status not in ("validating", "in_progress"):
            raise ApiError(
                400,
                f"batch {state.id} is {state.status}; only a batch that is validating or "
                "in_progress can be cancelled",
            )
        self._save(state, status="cancelling", cancelling_at=_now())
        self.say(f"batch {state.id}: cancelling")
        self._wake.set()  # a worker waiting for this batch's turn looks again
        if self._current == state.id:
            if self._proc is not None and self._proc.returncode is None:
                self._proc.send_signal(signal.SIGTERM)
            # not started yet: the worker sees the cancel before it starts the job
        else:
            self._finish_later(state)

    # ---- the worker -------------------------------------------------------------------------
    @property
    def _stopping(self) -> bool:
        return self._stopped.is_set()

    def _next(self) -> BatchState | None:
        ready = [s for s in self.batches.values() if s.status in ("in_progress", "finalizing")]
        return min(ready, key=lambda s: (s.created_ns, s.id), default=None)

    async def _loop(self) -> None:
        while not self._stopping:
            state = self._next()
            if state is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._advance(state)
            except Exception as err:  # a full disk, a child that cannot start, a bug
                self._trouble(state, err)
                await self._pause(RETRY_S)

    async def _advance(self, state: BatchState) -> None:
        if state.status == "finalizing":
            await self._finish(state, "completed")
            return
        self._current = state.id
        try:
            await self._run(state)
        finally:
            self._current = None
            self._proc = None

    async def _run(self, state: BatchState) -> None:
        job = self.store.job_dir(state.id)

        def queued() -> bool:
            return state.status == "in_progress"

        await self._until_unlocked(job, queued)
        await self._until_endpoints_answer(state, queued)
        if self._stopping:
            return
        if state.status == "cancelling":
            await self._finish(state, "cancelled")
            return
        if state.in_progress_at is None:
            self._save(state, in_progress_at=_now())
        self.say(f"batch {state.id}: running {state.total} request(s) in {job}")
        status = await self._run_job(state, job)
        if state.status == "cancelling":
            await self._finish(state, "cancelled")
        elif self._stopping:
            self.say(f"batch {state.id}: stopped with the server; it resumes on the next start")
        elif status in (0, 3):
            await self._finish(state, "completed")
        elif status in INTERRUPTED:
            self.say(
                f"batch {state.id}: its job was interrupted from outside (exit status "
                f"{status}); it resumes in {RETRY_S:.0f} s"
            )
            await self._pause(RETRY_S)
            if state.status == "cancelling":  # cancelled while it waited to resume
                await self._finish(state, "cancelled")
        else:
            await self._finish(state, "failed", [self._failure(state, status)])

    async def _run_job(self, state: BatchState, job: Path) -> int:
        """`sparkops batch run` on the batch's folder, its output appended to run.log."""
        log = self.store.log_path(state.id)
        fd = open_private(log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} sparkops batch run\n".encode())
            self._proc = await asyncio.create_subprocess_exec(
                *self.command.argv(self.store.input_path(state.id), job),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
                preexec_fn=_bound_to(os.getpid()),
            )
        finally:
            os.close(fd)
        if state.status == "cancelling" or self._stopping:  # asked while it started
            self._proc.send_signal(signal.SIGTERM)
        return await self._proc.wait()

    async def _until_unlocked(self, job: Path, still: Callable[[], bool]) -> None:
        """Wait while another process holds the job folder (a job a killed server left,
        still stopping), so the next run is not refused and no file is read mid-write."""
        told = False
        while (holder := lock_holder(job)) is not None and still() and not self._stopping:
            if not told:
                self.say(f"{job}: waiting for pid {holder} to leave the job folder")
                told = True
            await self._pause(POLL_S)

    async def _until_endpoints_answer(self, state: BatchState, still: Callable[[], bool]) -> None:
        """Wait until every endpoint answers /v1/models (any answer below 500: a wrong key is
        the job's to refuse, with its own line)."""
        told = False
        timeout = aiohttp.ClientTimeout(total=ENDPOINT_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while still() and not self._stopping:
                down = [u for u in self.command.endpoints if not await self._answers(session, u)]
                if not down:
                    return
                if not told:
                    self.say(f"batch {state.id}: waiting for {down[0]} to answer /v1/models")
                    told = True
                await self._pause(ENDPOINT_POLL_S)

    async def _answers(self, session: aiohttp.ClientSession, url: str) -> bool:
        try:
            target = api_url(normalise_base(url), "/v1/models")
            async with session.get(target, headers=self.command.headers()) as response:
                return response.status < 500
        except (aiohttp.ClientError, TimeoutError, OSError, UserError):
            return False

    async def _finish(
        self, state: BatchState, final: str, errors: list[BatchErrorItem] | None = None
    ) -> None:
        """End a batch: its output and error files from what finished, then its final state
        (in that order, so a crash between them finishes it again with the same files)."""
        if final == "completed" and state.status != "finalizing":
            self._save(state, status="finalizing", finalizing_at=_now())
        await self._until_unlocked(self.store.job_dir(state.id), lambda: True)
        if self._stopping:
            return
        output_id, error_id, succeeded, failed = await asyncio.to_thread(self._outputs, state)
        stamp = {"completed": "completed_at", "cancelled": "cancelled_at", "failed": "failed_at"}
        self._save(
            state,
            status=final,
            output_file_id=output_id,
            error_file_id=error_id,
            completed=succeeded,
            failed=failed,
            errors=errors,
            **{stamp[final]: _now()},
        )
        self._counts.pop(state.id, None)
        why = f": {errors[0].message}" if errors else ""
        self.say(f"batch {state.id}: {final}, {succeeded} succeeded, {failed} failed{why}")

    def _outputs(self, state: BatchState) -> tuple[str | None, str | None, int, int]:
        """Write the batch's output and error files (a file only where it has lines)."""
        temps = (self.store.temp_path(), self.store.temp_path())
        try:
            results = self.store.job_dir(state.id) / RESULTS
            counts = split_results(results, *temps)
            ids: list[str | None] = []
            for temp, file_id, count, name in zip(
                temps, output_file_ids(state.id), counts, ("output", "errors"), strict=True
            ):
                if count:
                    self.store.publish(temp, file_id, f"{state.id}_{name}.jsonl", "batch_output")
                ids.append(file_id if count else None)
        finally:
            for temp in temps:
                temp.unlink(missing_ok=True)
        return ids[0], ids[1], counts[0], counts[1]

    def _finish_later(self, state: BatchState) -> None:
        """Finish a batch that is not the running one (a queued batch cancelled), beside the
        worker, trying again after a failure to write."""

        async def finish() -> None:
            while not self._stopping and state.status == "cancelling":
                try:
                    await self._finish(state, "cancelled")
                except Exception as err:
                    self._trouble(state, err)
                    await self._pause(RETRY_S)

        task = asyncio.create_task(finish())
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    def _failure(self, state: BatchState, status: int) -> BatchErrorItem:
        """Why a job ended early, in its own words (its last `sparkops: error:` line)."""
        said = _last_error(self.store.log_path(state.id))
        what = said or f"sparkops batch run ended with exit status {status}"
        return BatchErrorItem(
            code=ERROR_CODES.get(status, "job_failed"),
            message=f"{what} (the batch's lines that finished are in its output and error "
            f"files; its job folder is {self.store.job_dir(state.id)})",
        )

    def _save(self, state: BatchState, **changes: Any) -> None:
        """Write the changed state, then change it in memory (a failed write changes nothing)."""
        self.store.save_batch(state.model_copy(update=changes))
        for name, value in changes.items():
            setattr(state, name, value)

    async def _pause(self, seconds: float) -> None:
        """Sleep, or less when something happens (a cancel, a new batch, the server stopping):
        whoever paused looks again at once."""
        self._wake.clear()
        if self._stopping:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _trouble(self, state: BatchState, err: Exception) -> None:
        """One line for a failure the worker retries; a bug's traceback goes to crash.log."""
        if isinstance(err, UserError | OSError):
            self.say(f"batch {state.id}: {err}; trying again in {RETRY_S:.0f} s")
            return
        where = log_crash(self.store.root, f"batch {state.id}", err)
        self.say(
            f"batch {state.id}: internal error ({type(err).__name__}, {where}); trying again "
            f"in {RETRY_S:.0f} s; please report it"
        )


def log_crash(root: Path, what: str, err: BaseException) -> str:
    """Append a bug's traceback to ROOT/crash.log (0600: it may quote a request); where it is."""
    path = root / CRASH_LOG
    try:
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {what}\n")
            fh.write(redact("".join(traceback.format_exception(err))))
    except OSError:
        return "the root could not hold crash.log"
    return f"traceback in {path}"


def _last_error(log: Path) -> str | None:
    """The last `sparkops: error: ...` line the latest job run wrote (after the last `---`
    header the runner writes), without its prefix; None when it wrote none (a crash)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    latest = text.rsplit("\n--- ", 1)[-1]
    errors = [x for x in latest.splitlines() if x.startswith("sparkops: error: ")]
    return errors[-1].removeprefix("sparkops: error: ") if errors else None
