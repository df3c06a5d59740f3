"""SIGINT / SIGTERM / SIGHUP during a job: stop the run, never die mid-write.

Once the run has begun, a signal is the run's stop (batch/hooks.py `Stopper`): in-flight calls
are cancelled, the journal flushed, and the job exits resumable. Before it (validation, the
pre-flight, the serving record's start line) there is nothing to wind down, so the job's task
is cancelled instead; batch/job.py says which signal it was. SIGHUP (the terminal went away: a
dropped ssh session) is left alone where it is ignored (`nohup`), so a job started that way
keeps running as its user asked.
"""

from __future__ import annotations

import asyncio
import signal

from sparkops.batch.hooks import Stop, Stopper


class JobSignals:
    """The job's signal handlers, installed for as long as the `with` block runs (from the
    job's own task: it is the one cancelled before the run begins)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, stopper: Stopper) -> None:
        """stopper: the run's stop, the one its hooks carry."""
        self.stopper = stopper
        self.signum: int | None = None
        self._task = asyncio.current_task()
        self._installed: list[int] = []

    def __enter__(self) -> JobSignals:
        loop = asyncio.get_running_loop()
        for signum in self.SIGNALS:
            if signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN:
                continue  # nohup: a hang-up must not stop the job
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
        taken = self.stopper.stop(Stop("signal", signal.Signals(signum).name, signum))
        if not taken and self._task is not None:
            self._task.cancel()  # before the run: nothing to wind down
