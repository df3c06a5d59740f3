"""`sparkops batch verify DIR`'s check: the job folder's files now against the seals its runs
wrote (jobdir/digest.py says what a seal holds and what counts as an edit), the saved
pipeline's files against their index (sealed itself; jobdir/pipeline_copy.py), and the
one-line warning `report` and `compare` print for a folder that does not verify."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.digest import (
    APPENDED,
    CHANGED,
    EDITS,
    FIXED,
    NEW,
    REMOVED,
    REWRITTEN,
    SEALED,
    UNCHANGED,
    WHOLE,
    FileDigest,
    Seal,
    first_difference,
    line_count,
    prefix_matches,
    readable,
    same_file,
    seals,
)
from sparkops.jobdir.folder import RUNS
from sparkops.jobdir.pipeline_copy import CopyDamaged, check_saved, read_saved


@dataclass(frozen=True)
class FileCheck:
    """One file against the last seal: its state and the sentence that says it."""

    name: str
    state: str  # UNCHANGED, APPENDED, CHANGED, REMOVED, NEW, REWRITTEN (history)
    sentence: str

    @property
    def edited(self) -> bool:
        return self.state in EDITS


@dataclass(frozen=True)
class Verification:
    """`batch verify`'s answer: per file now, what the chain of seals recorded, and whether
    the folder verifies (no edit anywhere)."""

    directory: Path
    sealed_runs: tuple[int, ...]
    files: tuple[FileCheck, ...] = ()
    history: tuple[str, ...] = ()  # edits the seals themselves recorded, and broken links
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def sealed(self) -> bool:
        return bool(self.sealed_runs)

    @property
    def verified(self) -> bool:
        return self.sealed and not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "verified": self.verified,
            "sealed_runs": list(self.sealed_runs),
            "files": {f.name: {"state": f.state, "said": f.sentence} for f in self.files},
            "history": list(self.history),
            "problems": list(self.problems),
        }


def verify(directory: Path) -> Verification:
    """Recompute the job folder's digests against its seals (module docstring)."""
    found = list(seals(directory))
    if not found:
        return Verification(directory, ())
    history = chain_breaks(found) + recorded_edits(found)
    last = found[-1]
    started_since = run_started_after(directory, last.run)
    names = (*SEALED, *(n for n in last.files if n not in SEALED))
    checks = tuple(
        check_file(directory, name, last, started_since)
        for name in names
        if name in last.files or readable(directory / name)
    ) + tuple(saved_pipeline_files(directory))
    problems = list(history) + [f"{c.name}: {c.sentence}" for c in checks if c.edited]
    return Verification(
        directory, tuple(s.run for s in found), checks, tuple(history), tuple(problems)
    )


def saved_pipeline_files(directory: Path) -> list[FileCheck]:
    """Each saved pipeline file against its sha256 in the index (an index that cannot be read
    is the seal's to report: it is sealed)."""
    try:
        saved = read_saved(directory)
    except CopyDamaged:
        return []
    if saved is None:
        return []
    states = {"unchanged": UNCHANGED, "changed": CHANGED, "removed": REMOVED}
    return [FileCheck(c.path, states[c.state], c.sentence) for c in check_saved(directory, saved)]


def chain_breaks(found: list[Seal]) -> list[str]:
    """Seals whose link to the one before does not hold: a seal edited after it was written."""
    out = []
    for before, after in itertools.pairwise(found):
        if after.previous != before.sha256:
            out.append(
                f"runs.jsonl: run {before.run}'s seal is not the one run {after.run}'s seal "
                "links to (an end line of runs.jsonl was edited)"
            )
    return out


def recorded_edits(found: list[Seal]) -> list[str]:
    """Edits a later run's seal recorded between two runs: a resume does not hide them."""
    out = []
    for before, after in itertools.pairwise(found):
        for name, digest in after.files.items():
            if digest.since == CHANGED:
                out.append(
                    f"{name}: changed between run {before.run}'s end and run {after.run}'s "
                    "end, not by appending (seen and recorded by run "
                    f"{after.run}'s seal)"
                )
        for name in after.removed:
            out.append(f"{name}: removed between run {before.run}'s end and run {after.run}'s end")
    return out


def run_started_after(directory: Path, run: int) -> bool:
    """Whether a run started after run `run` ended (its lines may follow the seal)."""
    return any(e.event == "start" and e.run > run for e in lines.run_events(directory / RUNS))


def check_file(directory: Path, name: str, last: Seal, started_since: bool) -> FileCheck:
    """One file now against the last seal."""
    path = directory / name
    sealed = last.files.get(name)
    ended = f"run {last.run} ended"
    if sealed is None:
        if started_since or name in WHOLE:
            return FileCheck(name, NEW, f"new since {ended}, written by a later run")
        return FileCheck(name, CHANGED, f"new since {ended}, and no run started since")
    if not readable(path):
        return FileCheck(name, REMOVED, f"removed since {ended} (it held {_lines(sealed)})")
    if same_file(path, sealed):
        return FileCheck(name, UNCHANGED, f"unchanged since {ended} ({_lines(sealed)})")
    if name in FIXED:  # written once, never rewritten by a run
        return FileCheck(name, CHANGED, changed_sentence(path, sealed, ended))
    if name in WHOLE:
        if started_since:
            return FileCheck(name, REWRITTEN, f"rewritten by a run started since {ended}")
        return FileCheck(name, CHANGED, f"changed since {ended}, and no run started since")
    if prefix_matches(path, sealed):
        return appended(name, line_count(path) - sealed.lines, ended, started_since)
    return FileCheck(name, CHANGED, changed_sentence(path, sealed, ended))


def appended(name: str, grown: int, ended: str, started_since: bool) -> FileCheck:
    """A file that only grew since the seal: a later run's lines, or not the kit's."""
    if name == RUNS:  # the sealed run's own end line follows its seal
        later = f" and {grown - 1:,} later line(s)" if grown > 1 else ""
        return FileCheck(name, APPENDED, f"sealed up to {ended}; its end line{later} follow")
    added = f"{grown:,} line(s) appended since {ended}"
    if started_since:
        return FileCheck(name, APPENDED, f"{added} (by a later run: not an edit)")
    return FileCheck(name, CHANGED, f"{added}, but no run started since: not the kit's")


def changed_sentence(path: Path, sealed: FileDigest, ended: str) -> str:
    """Where a file differs from its seal: the first block of lines that does, and counts."""
    where = first_difference(path, sealed)
    if where is None:
        place = "its last line differs"
    elif where[0] == where[1]:
        place = f"line {where[0]:,} differs first"
    else:
        place = f"lines {where[0]:,}-{where[1]:,} differ first"
    return (
        f"changed since {ended}, not by appending: {place}; {line_count(path):,} lines now, "
        f"{sealed.lines:,} then ({path.stat().st_size:,} bytes now, {sealed.bytes:,} then)"
    )


def _lines(sealed: FileDigest) -> str:
    return f"{sealed.lines:,} line(s), {sealed.bytes:,} bytes"


def warning(directory: Path) -> str | None:
    """The one-line warning `report` and `compare` print for a folder that does not verify
    (None when it verifies, or has no seal to check: a job from before seals)."""
    try:
        found = verify(directory)
    except OSError:
        return None
    if not found.sealed or found.verified:
        return None
    first = found.problems[0]
    more = f" (and {len(found.problems) - 1} more)" if len(found.problems) > 1 else ""
    return (
        f"{directory} does not verify: {first}{more}; `sparkops batch verify {directory}` "
        "says what changed, file by file"
    )
