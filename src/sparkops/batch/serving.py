"""The job's serving record (I/O edge): what served it, in DIR/serving.jsonl (0600).

Lines, append-only, each with `t`, `run`, `serving` (the job's serving epoch: 0 as the job
first found its endpoints, +1 at every change) and `results_from` (how many results lines
were written before it, the boundary in results.jsonl; every pipeline results line and
OpenAI meta line also carries its `serving` epoch):

- `{"event": "start", ...}` once per run: the kit's version, the pipeline and input
  fingerprints, the GPU state (`sparkops-gpu-check --json`, when it runs on this machine,
  else {"unavailable": why}), the stack's own record (`--stack-record`, written by the
  deploy next to the compose file, or the `sparkops local up` server's model and command
  line when an endpoint is one), and per endpoint its identity (see jobdir/identity.py) or
  {"unreachable": why}; `changes` per endpoint when a resumed job finds another setup.
- `{"event": "change", "endpoint": ..., "identity": ..., "changes": [...]}` whenever an
  endpoint's identity changes during a run (re-checked on every metrics sample, so also
  right after an endpoint comes back from an outage).
- `{"event": "other-model", "model": ..., "expected": ...}` the first time an answer names a
  model other than the pipeline's (a router's fallback; batch/checks.py watches each answer).

Server facts only: no record text, no ids, and the stack record loses every variable whose
name says secret (token, key, password) before it is written.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparkops import __version__, openai_http
from sparkops.batch.endpoints import Endpoint, metrics_url
from sparkops.batch.hooks import RunHooks
from sparkops.batch.options import JobConfig
from sparkops.batch.stop_rules import Stop
from sparkops.errors import JobStopped
from sparkops.inputs import read_json
from sparkops.jobdir import identity, serving_lines
from sparkops.jobdir.durable import append_json
from sparkops.jobdir.folder import SERVING, Manifest
from sparkops.jobdir.identity import Identity, IdentityChange
from sparkops.jobdir.run import JobRun
from sparkops.openai_http import ServerClient
from sparkops.privacy import is_secret_name, redact

# One identity probe (three small GETs) is bounded: a slow server is "no answer this time".
PROBE_TIMEOUT_S = 10.0
GPU_CHECK = "sparkops-gpu-check"
GPU_CHECK_ARGS = ("--json", "--samples", "2", "--interval", "0.5")
GPU_CHECK_TIMEOUT_S = 10.0
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


async def probe(client: ServerClient, base: str, metrics_text: str | None = None) -> Identity:
    """An endpoint's identity now; NoAnswer when it cannot be read this time (down, slow,
    a 5xx, an answer of the wrong shape): the caller keeps the last one, never guesses.
    metrics_text: its /metrics page when the caller has just read it (else it is asked)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            status, text = await client.get_raw(base + "/version")
            version = _json_or_none(text) if status == 200 else None
            status, text = await client.get_raw(base + "/v1/models")
            if status != 200:
                raise openai_http.NoAnswer(f"/v1/models HTTP {status}")
            models = _json_or_none(text)
            if metrics_text is None:
                status, text = await client.get_raw(metrics_url(base))
                metrics_text = text if status == 200 else None
    except TimeoutError:
        raise openai_http.NoAnswer(f"no answer within {PROBE_TIMEOUT_S:g} s") from None
    try:
        cache = identity.cache_config(metrics_text) if metrics_text else None
        return identity.build_identity(version, models, cache)
    except ValueError as err:
        raise openai_http.NoAnswer(str(err)) from None


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def gpu_state(endpoints: list[str]) -> dict[str, Any]:
    """`sparkops-gpu-check --json` of this machine, when an endpoint runs here; never fails.

    The GPU serving a remote endpoint is not this machine's: that is recorded as
    unavailable rather than describing the wrong GPU.
    """
    hosts = {urlsplit(url).hostname for url in endpoints}
    if not hosts & _LOCAL_HOSTS:
        return {"unavailable": "the endpoints are not on this machine"}
    tool = _gpu_check_path()
    if tool is None:
        return {"unavailable": f"{GPU_CHECK} is not installed here"}
    try:
        done = subprocess.run(
            [tool, *GPU_CHECK_ARGS],
            capture_output=True,
            text=True,
            timeout=GPU_CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"unavailable": f"{GPU_CHECK} took longer than {GPU_CHECK_TIMEOUT_S:g} s"}
    except OSError as err:
        return {"unavailable": f"{GPU_CHECK} could not run ({type(err).__name__})"}
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"unavailable": f"{GPU_CHECK} printed no JSON (exit {done.returncode})"}
    return result if isinstance(result, dict) else {"unavailable": f"{GPU_CHECK}: not an object"}


def _gpu_check_path() -> str | None:
    beside = Path(sys.executable).parent / GPU_CHECK  # the kit's own venv
    if beside.is_file():
        return str(beside)
    return shutil.which(GPU_CHECK)


def read_stack_record(path: Path) -> dict[str, Any]:
    """The deploy's stack-record.json (see sparkops.render.record), secrets dropped."""
    data = read_json(
        path,
        what="--stack-record",
        fix="pass the stack-record.json the deploy wrote next to compose.yml (readable by the "
        "job's user), or leave the option out",
    )
    return without_secrets(data)


def without_secrets(obj: Any) -> Any:
    """Drop every mapping key that names a secret, at any depth (defence in depth: the
    deploy's record has none, a hand-made one might)."""
    if isinstance(obj, dict):
        return {k: without_secrets(v) for k, v in obj.items() if not is_secret_name(str(k))}
    if isinstance(obj, list):
        return [without_secrets(v) for v in obj]
    return obj


def _changes(
    known: dict[str, Identity], found: dict[str, Identity | None]
) -> dict[str, list[IdentityChange]]:
    """Per endpoint found and known, what differs (endpoints with no difference left out)."""
    out = {}
    for base, ident in found.items():
        if ident is not None and base in known:
            changes = identity.diff(known[base], ident)
            if changes:
                out[base] = changes
    return out


@dataclass
class ServingLog:
    """The job's serving.jsonl: what each endpoint served first (the baseline), last, and
    the epoch; decides drift and writes its lines."""

    directory: Path
    baseline: dict[str, Identity] = field(default_factory=dict)
    last: dict[str, Identity] = field(default_factory=dict)
    epoch: int = 0

    @property
    def path(self) -> Path:
        return self.directory / SERVING

    @classmethod
    def load(cls, directory: Path) -> ServingLog:
        """The record so far (a resumed job compares against it)."""
        log = cls(directory)
        for line in serving_lines.serving_lines(directory / SERVING):
            if line.serving is not None:
                log.epoch = max(log.epoch, line.serving)
            seen: dict[str, Identity] = {}
            if isinstance(line, serving_lines.ServingStart):
                seen = line.identities()
            elif isinstance(line, serving_lines.ServingChange) and line.identity is not None:
                seen = {line.endpoint: line.identity}
            for base, ident in seen.items():
                log.baseline.setdefault(base, ident)
                log.last[base] = ident
        return log

    def start_changes(self, found: dict[str, Identity | None]) -> dict[str, list[IdentityChange]]:
        """Per endpoint, what differs from the last identity the job recorded."""
        return _changes(self.last, found)

    def off_baseline(self, found: dict[str, Identity | None]) -> dict[str, list[IdentityChange]]:
        """Per endpoint, what differs from what served the job first (--strict-serving)."""
        return _changes(self.baseline, found)

    def write_start(
        self,
        run: int,
        found: dict[str, Identity | None],
        problems: dict[str, str],
        context: dict[str, Any],
        results_from: int,
    ) -> dict[str, list[IdentityChange]]:
        """The run's start line; returns the changes since the job's last record."""
        changes = self.start_changes(found)
        if changes:
            self.epoch += 1
        endpoints: dict[str, dict[str, Any]] = {}
        for base, ident in found.items():
            if ident is None:
                endpoints[base] = {"unreachable": problems.get(base, "no answer")}
            else:
                endpoints[base] = ident
                self.baseline.setdefault(base, ident)
                self.last[base] = ident
        line = serving_lines.ServingStart(
            round(time.time(), 3), run, self.epoch, results_from, context, endpoints, changes
        )
        append_json(self.path, line.to_json())
        return changes

    def observe(
        self, run: int, base: str, ident: Identity, results_from: int
    ) -> list[IdentityChange]:
        """A fresh identity of one endpoint: a change line (and a new epoch) when it differs."""
        before = self.last.get(base)
        if before is None:  # unreachable at start, first seen now: its baseline, not drift
            self.baseline[base] = self.last[base] = ident
            self._write_change(run, base, ident, results_from, [])
            return []
        changes = identity.diff(before, ident)
        if not changes:
            return []
        self.epoch += 1
        self.last[base] = ident
        self._write_change(run, base, ident, results_from, changes)
        return changes

    def other_model(self, run: int, model: str, expected: str, results_from: int) -> None:
        """An answer came from `model`, not the pipeline's `expected` (a router's fallback):
        one line per other model; each step's `model` in results.jsonl says which answered."""
        line = serving_lines.OtherModel(
            round(time.time(), 3), run, self.epoch, results_from, model, expected
        )
        append_json(self.path, line.to_json())

    def _write_change(
        self, run: int, base: str, ident: Identity, results_from: int, changes: list[IdentityChange]
    ) -> None:
        """One change line: the endpoint's identity now, in the current epoch (no changes:
        an endpoint first seen mid-job)."""
        line = serving_lines.ServingChange(
            round(time.time(), 3), run, self.epoch, results_from, base, ident, changes
        )
        append_json(self.path, line.to_json())


def job_context(
    pipeline_fingerprint: str,
    input_fingerprint: str,
    gpu: dict[str, Any],
    stack: dict[str, Any] | None,
) -> dict[str, Any]:
    """The job-level part of a start line."""
    return {
        "kit_version": __version__,
        "pipeline_fingerprint": pipeline_fingerprint,
        "input_fingerprint": input_fingerprint,
        "gpu": gpu,
        "stack": stack,
    }


def change_sentence(base: str, changes: list[IdentityChange], epoch: int) -> str:
    """What the progress line and the job's stderr say when an endpoint changed."""
    return (
        f"endpoint {base} changed what it serves: {identity.describe(changes)}; "
        f"records finished from now on are marked serving={epoch} (see serving.jsonl)"
    )


def strict_message(base: str, changes: list[IdentityChange], during: bool) -> str:
    """--strict-serving's one line (JobStopped, exit 1, resumable)."""
    when = "during the job" if during else "since the job started"
    return (
        f"--strict-serving: endpoint {base} changed {when}: "
        f"{identity.describe(changes)}; finished records are kept: restore the server "
        "it started with and run the same command to resume, or run without --strict-serving "
        "to accept the change (the boundary is recorded in serving.jsonl)"
    )


async def start(
    client: ServerClient,
    bases: list[str],
    cfg: JobConfig,
    job: JobRun,
    manifest: Manifest,
    stack: dict[str, Any] | None,
) -> ServingLog:
    """The run's start line in serving.jsonl: what serves the job now (each endpoint of
    `bases`), against what served it before (a resumed job); --strict-serving refuses a
    changed setup before any request. Returns the record, for the run's serving watch."""
    log = ServingLog.load(job.directory)
    # the GPU check (a second or two of nvidia-smi samples) runs while the endpoints answer
    gpu = asyncio.create_task(asyncio.to_thread(gpu_state, cfg.endpoints))
    try:
        found: dict[str, identity.Identity | None] = {}
        problems: dict[str, str] = {}
        for base in bases:
            name = redact(base)
            try:
                found[name] = await probe(client, base)
            except openai_http.NoAnswer as err:
                found[name], problems[name] = None, redact(str(err))
        if cfg.strict_serving and (off := log.off_baseline(found)):
            changed, changes = next(iter(off.items()))
            raise JobStopped(strict_message(changed, changes, during=False))
        gpu_found = await gpu
    finally:
        gpu.cancel()  # stopped or interrupted: no task left pending (a no-op once done)
    context = job_context(
        manifest.pipeline_fingerprint, manifest.input_fingerprint, gpu_found, stack
    )
    if manifest.constraints is not None:  # which steps ran constrained (compare lists it)
        context["constraints"] = manifest.constraints
    # concurrency above the server's --max-num-seqs: said now, kept for the report
    context["capacity"] = identity.capacity(stack, cfg.concurrency, len(bases))
    if warning := identity.capacity_warning(context["capacity"]):
        print(f"sparkops: warning: {warning}", file=sys.stderr)
    for name, changes in log.write_start(
        job.number, found, problems, context, job.finished
    ).items():
        print(
            f"sparkops: warning: {change_sentence(name, changes, log.epoch)}",
            file=sys.stderr,
        )
    return log


@dataclass(frozen=True)
class ServingWatch:
    """What serves the job while one run goes on: each endpoint's identity re-checked on
    every /metrics sample (drift: a change line and a new epoch in the serving record, said
    on the progress line; --strict-serving's stop). The run's start line is `start`'s;
    answers from another model reach the record through the run's hooks (batch/checks.py).

    client: the job's side client; log: the record `start` began for this run; hooks: the
    run's (a change is said there; --strict-serving stops the run)."""

    client: ServerClient
    log: ServingLog
    job: JobRun
    strict: bool
    hooks: RunHooks

    @property
    def epoch(self) -> int:
        return self.log.epoch

    async def check(self, ep: Endpoint, metrics_text: str | None) -> None:
        """Re-check one endpoint's identity (after its /metrics sample)."""
        try:
            ident = await probe(self.client, ep.base, metrics_text)
        except openai_http.NoAnswer:
            return  # down or slow this time: the next sample (or its recovery) checks again
        changes = self.log.observe(self.job.number, ep.name, ident, self.job.finished)
        if not changes:
            return
        # the records finished from now on carry the new epoch (the hooks read it from the log)
        self.hooks.say(change_sentence(ep.name, changes, self.log.epoch))
        if self.strict:
            self.hooks.stop(Stop("serving-changed", strict_message(ep.name, changes, during=True)))
