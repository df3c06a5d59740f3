"""The job's pipeline as its folder keeps it: what `batch run` saves, the check every run makes
of the saved copy, and the pipeline `report --methods` writes from.

`batch run` reads the pipeline YAML and every file it names for the copy (`pipeline_source`;
jobdir/pipeline_copy.py writes it, once) and, at every run, checks the saved copy still loads
to the job's fingerprint (`copy_problem`: the manifest's fingerprint stays the authority, the
copy is never rewritten, a copy that no longer matches is said in one warning).

`report --methods` takes the saved copy (`methods_pipeline`), proven the job's: each file as
its index says (sha256) and the whole loading to the manifest's fingerprint and constraint
modes. `--pipeline P.yaml` is for a folder from before the copy (proven by the fingerprint, as
before), or one whose copy was damaged; given beside an intact copy it must be the same bytes,
else it is refused naming both sha256 values.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkops.errors import UserError
from sparkops.jobdir.folder import MANIFEST, Manifest
from sparkops.jobdir.pipeline_copy import (
    COPY_DIR,
    INDEX,
    CopyDamaged,
    PipelineSource,
    SavedPipeline,
    SourceFile,
    check_saved,
)
from sparkops.jobdir.reader import JobFolder
from sparkops.methods.pipeline import JobPipeline, checked_pipeline, modes_problem
from sparkops.pipeline.spec import load_pipeline, named_files


# ---- what batch run saves and checks --------------------------------------------------------
def pipeline_source(path: Path) -> PipelineSource:
    """The YAML's bytes and every file it names (a file named twice is read once), as a run
    reads them for the job folder's copy."""
    found: dict[str, tuple[bytes, list[str]]] = {}
    for named in named_files(path):
        if named.named not in found:
            found[named.named] = (_read(named.path), [])
        found[named.named][1].append(f"{named.step}: {named.role}")
    files = tuple(SourceFile(n, data, tuple(uses)) for n, (data, uses) in found.items())
    return PipelineSource(path.name, _read(path), files)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise UserError(
            f"cannot read {path} ({err.strerror}) for the job folder's copy of the pipeline; "
            "fix the file and run again"
        ) from None


def copy_problem(directory: Path, manifest: Manifest) -> str | None:
    """Why the job folder's saved pipeline is not the job's (None: it is, or there is none)."""
    try:
        load_saved(directory, manifest)
    except UserError as err:
        return (
            f"{err}; the copy is kept as it is (never rewritten): `sparkops report DIR "
            "--methods` will need --pipeline P.yaml"
        )
    return None


# ---- the saved copy, loaded and proven ------------------------------------------------------
def load_saved(directory: Path, manifest: Manifest) -> JobPipeline | None:
    """The saved copy, proven the job's (None: the folder keeps none). A copy whose files are
    not as its index says, or that loads to another fingerprint or other constraint modes,
    raises CopyDamaged naming what differs."""
    saved = JobFolder(directory).saved_pipeline()
    if saved is None:
        return None
    copy = directory / COPY_DIR
    edited = [c for c in check_saved(directory, saved) if c.state != "unchanged"]
    if edited:
        first = edited[0]
        raise CopyDamaged(f"{copy} (the job's saved pipeline): {first.path}: {first.sentence}")
    try:
        spec = load_pipeline(saved.yaml_path(directory), files=saved.places(directory))
    except UserError as err:
        raise CopyDamaged(f"{copy} (the job's saved pipeline) does not load: {err}") from None
    if spec.fingerprint() != manifest.pipeline_fingerprint:
        raise CopyDamaged(
            f"{copy} (the job's saved pipeline) has fingerprint {spec.fingerprint()}, the "
            f"job's {manifest.pipeline_fingerprint} ({MANIFEST})"
        )
    if (modes := modes_problem(spec, manifest)) is not None:
        raise CopyDamaged(
            f"{copy} (the job's saved pipeline) runs its steps constrained as {modes}, not as "
            f"the job ran them ({MANIFEST})"
        )
    files = {use: (f.path, f.sha256) for f in saved.files for use in f.uses}
    return JobPipeline(spec, saved.yaml.path, saved.yaml.sha256, files)


def saved_or_none(directory: Path, manifest: Manifest) -> JobPipeline | None:
    """The saved copy when it is intact, else None (compare's sections: the verification
    warning says what changed)."""
    try:
        return load_saved(directory, manifest) if manifest.kind != "openai" else None
    except UserError:
        return None


# ---- the pipeline report --methods writes from ---------------------------------------------
def methods_pipeline(directory: Path, manifest: Manifest, given: Path | None) -> JobPipeline | None:
    """The job's pipeline for its methods: the saved copy, or `--pipeline` where the folder
    keeps none (or a damaged one); None for an OpenAI batch job (no pipeline describes it)."""
    if manifest.kind == "openai":
        if given is not None:
            raise UserError(
                f"{directory} ran an OpenAI batch file (each line its own request), so no "
                "pipeline describes it; drop --pipeline"
            )
        return None
    try:
        saved = load_saved(directory, manifest)
    except CopyDamaged as err:
        if given is None:
            raise UserError(
                f"{err}; `sparkops batch verify {directory}` says what changed; pass --pipeline "
                "P.yaml (the pipeline file the job ran) to write the methods from it"
            ) from None
        return given_pipeline(given, manifest, directory)
    if saved is None:
        if given is None:
            raise UserError(
                f"{directory} keeps no copy of its pipeline (a job run by a kit from before the "
                f"copy, no {INDEX}); pass --pipeline P.yaml, the pipeline file the job ran, to "
                "write its methods"
            )
        return given_pipeline(given, manifest, directory)
    if given is not None:
        same_as_saved(given, JobFolder(directory).saved_pipeline(), directory)
    return saved


def given_pipeline(path: Path, manifest: Manifest, directory: Path) -> JobPipeline:
    """`--pipeline` proven the job's by the manifest's fingerprint, each file's sha256 read."""
    spec = checked_pipeline(path, manifest, directory)
    source = pipeline_source(path)
    files = {
        use: (file.named, hashlib.sha256(file.data).hexdigest())
        for file in source.files
        for use in file.uses
    }
    return JobPipeline(spec, path.name, hashlib.sha256(source.data).hexdigest(), files)


def same_as_saved(given: Path, saved: SavedPipeline | None, directory: Path) -> None:
    """Refuse a --pipeline whose YAML or any file it names is not the saved copy's bytes."""
    if saved is None:
        return
    source = pipeline_source(given)
    fix = "drop --pipeline: the job folder keeps the pipeline the job ran"
    ours = hashlib.sha256(source.data).hexdigest()
    if ours != saved.yaml.sha256:
        raise UserError(
            f"--pipeline {given} is not the pipeline {directory} saved at its first run: it has "
            f"sha256 {ours}, the saved {directory / saved.yaml.path} {saved.yaml.sha256}; {fix}"
        )
    kept = {f.named: f for f in saved.files}
    for file in source.files:
        digest = hashlib.sha256(file.data).hexdigest()
        copy = kept.get(file.named)
        if copy is None or copy.sha256 != digest:
            theirs = f"the saved {directory / copy.path} {copy.sha256}" if copy else "none saved"
            raise UserError(
                f"--pipeline {given} is not the pipeline {directory} saved at its first run: "
                f"the file it names as {file.named!r} has sha256 {digest}, {theirs}; {fix}"
            )
