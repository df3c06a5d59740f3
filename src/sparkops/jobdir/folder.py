"""The job folder: its files, manifest, lock and backups; the one module that knows the layout.

A job folder (`--out DIR`) holds the results journal (jobdir/journal.py), the manifest (what
the job is: changing it means a different experiment), the run log, the metrics timeline,
the serving record, the pipeline's copy (`pipeline/`, jobdir/pipeline_copy.py), the lock
(below), the report, and `previous-<time>/` backups of
files set aside by `--restart` or `--retry-errors` (never deleted). Every command that reads
a job (`batch status`, `report`, `compare`, `bench`) finds its files through `JobDir`; what
each line means is jobdir/lines.py's business, how it is written durably jobdir/durable.py's.

The lock: one run per job directory, an exclusive flock on DIR/lock holding the runner's pid.
Two runs on one directory would each read the same results.jsonl at start and then both send
every unfinished record: duplicates. The kernel drops a flock when its process dies, however
it dies (kill -9 included), so a lock left behind never needs clearing by hand: the next run
simply takes it. The lock file itself stays (deleting it would let two runs lock two
different files of the same name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictInt, StrictStr, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from sparkops.errors import UserError
from sparkops.files import open_private
from sparkops.jobdir import lines
from sparkops.jobdir.durable import (
    dumps_line,
    iter_json_lines,
    read_json_file,
    stop_on_full_disk,
    write_json_atomic,
    write_text_atomic,
)
from sparkops.jobdir.pipeline_copy import COPY_DIR
from sparkops.metrics.host import HOST_FILE

RESULTS = "results.jsonl"
MANIFEST = "manifest.json"
RUNS = "runs.jsonl"
TIMELINE = "timeline.jsonl"
PREFIX = "prefix.json"
LOCK = "lock"
META = "openai-meta.jsonl"  # OpenAI batch jobs: the kit's per-request fields (openai_lines)
SERVING = "serving.jsonl"  # batch/serving.py: what served the job
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
PLOT = "throughput.png"
# the job's files, which --restart sets aside together into one previous-<time>/ (COPY_DIR:
# the saved pipeline, a folder; HOST_FILE: batch/host_watch.py's readings of the host)
JOB_FILES: tuple[str, ...] = (RESULTS, MANIFEST, PREFIX, RUNS, TIMELINE, META, SERVING, PLOT)
JOB_FILES += (REPORT_JSON, REPORT_MD, COPY_DIR, HOST_FILE)


@dataclass(frozen=True)
class JobDir:
    """The paths of one job folder (its readers' handle, with a reader per file, is
    jobdir/reader.JobFolder)."""

    path: Path

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def runs(self) -> Path:
        return self.path / RUNS

    @property
    def meta(self) -> Path:
        return self.path / META

    @property
    def timeline(self) -> Path:
        return self.path / TIMELINE

    @property
    def serving(self) -> Path:
        return self.path / SERVING

    @property
    def host(self) -> Path:
        return self.path / HOST_FILE

    @property
    def prefix(self) -> Path:
        return self.path / PREFIX

    @property
    def report_json(self) -> Path:
        return self.path / REPORT_JSON

    @property
    def report_md(self) -> Path:
        return self.path / REPORT_MD

    @property
    def plot(self) -> Path:
        return self.path / PLOT

    def has_results(self) -> bool:
        """Whether any record has finished (results.jsonl exists and is not empty)."""
        return self.results.is_file() and self.results.stat().st_size > 0


@pydantic_dataclass(config=ConfigDict(extra="ignore"))
class Manifest:
    """What the job is: changing a fingerprint, the kind or the id field means a different
    experiment. Validated when read (a hand-edited field of the wrong type is one line).

    The input's size and modification time are what the job read: a run stops when they
    change under it. Older manifests lack them (None).
    """

    pipeline_fingerprint: StrictStr
    input_fingerprint: StrictStr
    input: StrictStr
    kind: Literal["jsonl", "csv", "openai"]
    id_field: StrictStr
    total: StrictInt = Field(ge=0)
    input_size: StrictInt | None = None
    input_mtime_ns: StrictInt | None = None
    # each step's structured-output mode (pipeline/constrain.py); None: an OpenAI batch
    # file, or a job made before constraining (its requests carried none)
    constraints: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        # without constraints (an OpenAI batch file) the manifest is the previous release's
        # bytes: an older kit reading it back, and tests/unit/test_jobdir_compat.py, see no change
        data = dataclasses.asdict(self)
        if data["constraints"] is None:
            del data["constraints"]
        return data


_MANIFEST = TypeAdapter(Manifest)


# The fields whose change means another experiment (a resume would mix two).
_IDENTITY = ("pipeline_fingerprint", "input_fingerprint", "kind", "id_field", "constraints")


def is_job_dir(directory: Path) -> bool:
    """Whether `directory` holds (or held) a sparkops job: its manifest, results or lock."""
    return any((directory / name).exists() for name in (MANIFEST, RESULTS, LOCK))


def check_out_dir(directory: Path) -> None:
    """Refuse an --out that is a file, a dangling link, or a non-empty folder that is not a
    job (read-only). A job writes and, on --restart, moves files, which must never touch a
    user's own files."""
    if directory.is_symlink() and not directory.exists():
        raise UserError(
            f"--out {directory} is a symbolic link to {os.readlink(directory)}, which does not "
            "exist; create that folder, or pass another --out DIR"
        )
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--out {directory} is a file, not a folder; pass a new --out DIR")
    if directory.is_dir() and not is_job_dir(directory):
        entries = sorted(p.name for p in directory.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise UserError(
                f"--out {directory} is a folder that is not a sparkops job and not empty "
                f"(it holds {shown}); pass a new or empty --out DIR"
            )


def ensure_job_dir(directory: Path) -> bool:
    """Create the job directory (0700), or check an existing one; True when created here.

    An existing empty folder is used with its mode left alone (the job's files are 0600 in
    any case): only a folder made here is set to 0700.
    """
    check_out_dir(directory)
    if directory.is_dir():
        return False
    try:
        directory.mkdir(parents=True)
    except FileExistsError:  # another run made it a moment ago
        return False
    except OSError as err:
        reason = "the file system is read-only" if err.errno == errno.EROFS else err.strerror
        raise UserError(
            f"cannot create --out {directory} ({reason}); pass a folder you can write"
        ) from None
    os.chmod(directory, 0o700)
    return True


def prepare_dir(directory: Path, manifest: Manifest, restart: bool) -> bool:
    """Create or check the job directory; returns True when resuming.

    A manifest that differs (other pipeline or input) is refused unless `restart`, or unless
    no record has finished yet (nothing to mix: a fail-fast stop, then the fix); then the old
    files are moved to `previous-<time>/`, never deleted. An unreadable
    manifest (empty or truncated by an older version or a crash) is rewritten when the job
    has no results yet; with results, or results and no manifest at all, nothing proves they
    belong to this experiment: refused unless `restart` (issue 37 item 5: another pipeline's
    answers were kept as this job's once its manifest was deleted).
    """
    ensure_job_dir(directory)
    job = JobDir(directory)
    path = job.manifest
    current = manifest.to_json()
    if path.exists():
        old = read_json_file(path)
        if not isinstance(old, dict):
            if not restart and job.has_results():
                raise UserError(
                    f"{path} is empty or corrupt, so nothing shows that the results in "
                    f"{directory} come from this pipeline and input; pass --restart to start "
                    "over (the old files are kept under DIR/previous-<time>/), or use a new "
                    "--out DIR"
                )
            old = {} if restart else current
        changed = [k for k in _IDENTITY if not _same(k, old.get(k), current.get(k))]
        if not changed and not restart:
            if old is current or old != current:  # unreadable, or the input's stamp moved
                write_json_atomic(path, current)
            return job.results.exists()
        if changed == ["constraints"] and not restart and job.has_results():
            raise UserError(constraint_change(directory, old.get("constraints"), current))
        if changed and not restart and job.has_results():
            what = ", ".join(k.replace("_fingerprint", "") for k in changed)
            raise UserError(
                f"{directory} holds a job with a different {what}; resuming would mix two "
                "experiments. Use a new --out DIR, or pass --restart to start over (the old "
                "files are kept under DIR/previous-<time>/)"
            )
        # --restart, or nothing finished yet (a job stopped by fail-fast, then its pipeline or
        # --id-field fixed): nothing to mix, so the old files are set aside and the job starts
        set_aside(directory, JOB_FILES)
    elif orphaned(job):
        if not restart:
            raise UserError(no_manifest(directory))
        set_aside(directory, JOB_FILES)
    write_json_atomic(path, current)
    return job.results.exists()


def orphaned(job: JobDir) -> bool:
    """Results or runs without a manifest: nothing shows which job they come from."""
    return not job.manifest.exists() and (job.results.exists() or job.runs.exists())


def no_manifest(directory: Path) -> str:
    """The one line a folder with results but no manifest gets (`batch run`, `batch status`,
    `report`): taken for this job, another pipeline's answers would be kept as its own."""
    return (
        f"{directory} holds results of a job but no {MANIFEST}, so nothing shows which "
        "pipeline and input they come from (a resume could keep another job's answers as this "
        "one's); use a new --out DIR, or pass --restart to the job's `sparkops batch run` to "
        "start over (the old files are kept under DIR/previous-<time>/)"
    )


def _same(key: str, old: Any, new: Any) -> bool:
    """Whether an identity field is unchanged; a manifest made before constraining (no
    `constraints`) equals one whose steps all run unconstrained."""
    if key == "constraints":
        return _held(old) == _held(new)
    return bool(old == new)


def _held(modes: Any) -> dict[str, Any]:
    return {s: m for s, m in (modes or {}).items() if m != "off"} if isinstance(modes, dict) else {}


def constraint_change(directory: Path, old: Any, current: dict[str, Any]) -> str:
    """A resume whose steps would run in another structured-output mode: a changed
    experiment (the answers before and after would be read two ways)."""
    new = current.get("constraints") or {}
    before = old if isinstance(old, dict) else {}
    steps = [s for s in new if before.get(s, "off") != new[s]]
    said = ", ".join(f"{s}: {before.get(s, 'off')} -> {new[s]}" for s in steps)
    return (
        f"{directory} holds a job whose first run ran its steps in another constraint mode "
        f"({said or 'steps changed'}); resuming would mix two experiments. Set the pipeline's "
        "constrain: back as it was to resume, use a new --out DIR, or pass --restart "
        "(old files kept under DIR/previous-<time>/)"
    )


def set_aside(directory: Path, names: tuple[str, ...]) -> Path:
    """Move the named job files that exist into a fresh `previous-<time>/`; returns it."""
    backup = _new_backup_dir(directory)
    for name in names:
        if (directory / name).exists():
            try:
                (directory / name).rename(backup / name)
            except OSError as err:
                raise stop_on_full_disk(err, directory / name) from None
    return backup


def drop_errors(directory: Path) -> int:
    """`--retry-errors`: take the error lines out of results.jsonl so those records are sent
    again; returns how many. The whole old file (and OpenAI meta file) is kept under
    `previous-<time>/`, and the new one is written atomically, so results.jsonl still holds
    each record at most once and a crash leaves the old file or the new one."""
    job = JobDir(directory)
    if not job.has_results():
        return 0
    kept: list[bytes] = []
    dropped: set[lines.Key] = set()
    for obj in iter_json_lines(job.results):
        result = lines.outcome(obj)
        if result.ok:
            kept.append(dumps_line(obj))
        else:
            dropped.add(result.key)
    if not dropped:
        return 0
    meta = [
        dumps_line(obj)
        for obj in iter_json_lines(job.meta)
        if lines.record_key(obj.get("custom_id"), obj.get("line") or 0) not in dropped
    ]
    backup = _new_backup_dir(directory)
    for name, body in ((RESULTS, kept), (META, meta)):
        source = directory / name
        if not source.exists():
            continue
        try:
            os.link(source, backup / name)
        except OSError as err:
            raise stop_on_full_disk(err, source) from None
        write_text_atomic(source, b"".join(body), durable=True)
    return len(dropped)


def _new_backup_dir(directory: Path) -> Path:
    """A fresh `previous-<time>[-N]/` (two restarts within one second get distinct ones)."""
    stem = time.strftime("previous-%Y%m%dT%H%M%S")
    for n in range(1, 10_000):
        backup = directory / (stem if n == 1 else f"{stem}-{n}")
        try:
            backup.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            raise stop_on_full_disk(err, backup) from None
        return backup
    raise UserError(f"{directory} has too many previous-* folders; remove some")


JOBS_SHOWN = 5


def job_dirs_under(directory: Path) -> list[Path]:
    """The job folders directly inside `directory` (those holding a manifest), sorted: a user
    who gives the parent of their jobs is shown them."""
    try:
        children = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return []
    return [p for p in children if (p / MANIFEST).is_file()]


def load_manifest(directory: Path) -> Manifest:
    """The job's manifest, for status and report; one line with the fix when unusable
    (missing, a folder, empty, not JSON, or fields of the wrong type)."""
    path = directory / MANIFEST
    if not directory.exists():
        raise UserError(f"{directory} does not exist; give the --out folder of a sparkops job")
    if not path.exists():
        if orphaned(JobDir(directory)):
            raise UserError(no_manifest(directory))
        jobs = job_dirs_under(directory)
        if jobs:
            shown = ", ".join(str(j) for j in jobs[:JOBS_SHOWN])
            more = f" and {len(jobs) - JOBS_SHOWN} more" if len(jobs) > JOBS_SHOWN else ""
            raise UserError(
                f"{directory} is not a sparkops job directory but holds {len(jobs)}: "
                f"{shown}{more}; give one of them"
            )
        raise UserError(
            f"{directory} is not a sparkops job directory (no {MANIFEST}); give the --out "
            "folder of a sparkops job"
        )
    if not path.is_file():
        raise UserError(
            f"{path} is not a file; move it away and run the job's `sparkops batch run` "
            "command again to rewrite it, then retry"
        )
    data = read_json_file(path)
    problem = "is empty or corrupt"
    if isinstance(data, dict):
        try:
            return _MANIFEST.validate_python(data)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            problem = f"has a bad field {where!r} ({first['msg']})"
    if JobDir(directory).has_results():
        raise UserError(
            f"{path} {problem}, so nothing shows which pipeline and input the results come "
            "from; pass --restart to the job's `sparkops batch run` to start over (the old "
            "files are kept under DIR/previous-<time>/), or use a new --out DIR"
        )
    raise UserError(
        f"{path} {problem}; run the job's `sparkops batch run` command again "
        f"(after deleting {path}) to rewrite it, then retry"
    )


class JobLock:
    """The held lock of one job directory; `release()` (or leaving the `with`) frees it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Free the lock (closing the file drops the flock); safe to call twice."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JobLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_job_dir(directory: Path) -> JobLock:
    """Create or check the job directory and lock it, or refuse naming the holder's pid."""
    ensure_job_dir(directory)
    path = directory / LOCK
    try:
        fd = open_private(path, os.O_RDWR)
    except OSError as err:  # a read-only or foreign folder: one line naming it
        raise stop_on_full_disk(err, path) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(directory) or _read_pid(fd)
        os.close(fd)
        who = f"pid {holder}" if holder else "a process that has not written its pid yet"
        raise UserError(
            f"{directory} is in use by another sparkops batch run ({who}); wait for it to "
            "finish or stop it, then run again (it resumes), or use another --out DIR"
        ) from None
    except OSError as err:
        os.close(fd)
        raise UserError(f"cannot lock {path} ({err.strerror}); put --out on a local disk") from None
    with contextlib.suppress(OSError):  # the pid is for people; a full disk must not stop here
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return JobLock(directory, fd)


def lock_holder(directory: Path) -> int | None:
    """The pid holding DIR/lock now, from the kernel's lock table (Linux /proc/locks).

    Read-only (taking the lock to test it could make a run starting at that moment fail),
    and right even when the pid in the file is stale. None when unlocked or unknown.
    """
    try:
        st = (directory / LOCK).stat()
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    dev_ino = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 8824 fe:00:2179110 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == dev_ino:
            with contextlib.suppress(ValueError):
                return int(fields[4])
    return None


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip())
    return None
