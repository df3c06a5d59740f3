"""The pipeline's facts: each step's prompts (their files and sha256), what its answer is, its
constraint mode, sampling settings and routing.

The pipeline comes from the job folder's saved copy (methods/saved.py), or, for a folder from
before the copy, from `--pipeline P.yaml`; either is refused unless its fingerprint and
constraint modes are the manifest's, so every fact below is proven to be the job's own. A
reader without a pipeline (compare on such an old folder) lists the steps the results name and
leaves the rest a marked place.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from sparkops.errors import UserError
from sparkops.jobdir.folder import Manifest
from sparkops.methods.facts import Fact, todo
from sparkops.pipeline import constrain
from sparkops.pipeline.spec import PipelineSpec, StepSpec, load_pipeline

MANIFEST_SOURCE = "manifest.json"


@dataclass(frozen=True)
class JobPipeline:
    """The job's pipeline, proven the job's: the spec, the YAML the facts name (the saved
    copy's place in the job folder, or --pipeline's file), its sha256, and each file a step
    uses ("screen: system prompt" -> the file as shown, its sha256)."""

    spec: PipelineSpec
    where: str
    yaml_sha256: str
    files: dict[str, tuple[str, str]] = field(default_factory=dict)

    def file(self, step: StepSpec, role: str) -> tuple[str, str] | None:
        return self.files.get(f"{step.name}: {role}")


def checked_pipeline(path: Path, manifest: Manifest, directory: Path) -> PipelineSpec:
    """`--pipeline` read and proven to be the job's: its fingerprint and steps' constraint
    modes are the manifest's (refused with both named otherwise)."""
    spec = load_pipeline(path)
    if spec.fingerprint() != manifest.pipeline_fingerprint:
        raise UserError(
            f"{path} is not the pipeline {directory} ran: its fingerprint is "
            f"{spec.fingerprint()}, the job's {manifest.pipeline_fingerprint} (manifest.json); "
            "pass the pipeline file the job was run with (prompt files as they were then)"
        )
    if (problem := modes_problem(spec, manifest)) is not None:
        raise UserError(
            f"{path} runs its steps constrained as {problem}, but {directory} ran them as "
            f"{_modes(manifest.constraints or {})} (manifest.json); pass the pipeline file the "
            "job was run with"
        )
    return spec


def modes_problem(spec: PipelineSpec, manifest: Manifest) -> str | None:
    """The spec's constraint modes in words when they are not the manifest's (None: they are,
    or the manifest is from before constraining)."""
    modes = {name: str(mode) for name, mode in constrain.modes(spec).items()}
    recorded = manifest.constraints
    if recorded is None:
        return None
    if {k: v for k, v in modes.items() if v != "off"} == {
        k: v for k, v in recorded.items() if v != "off"
    }:
        return None
    return _modes(modes)


def _modes(modes: dict[str, str]) -> str:
    return ", ".join(f"{step}: {mode}" for step, mode in modes.items())


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def answer_text(step: StepSpec, schema_file: tuple[str, str] | None = None) -> str:
    """What a step's answer may be, in words (`schema_file`: the JSON Schema file it reads,
    shown and its sha256)."""
    if step.parse is not None:
        return f"one of {', '.join(step.parse.choices)} (unreadable: {step.parse.default})"
    if step.score is not None:
        low, high = step.score.range
        bands = (
            "; bands " + ", ".join(f"{k} {a}-{b}" for k, (a, b) in step.score.bands.items())
            if step.score.bands
            else ""
        )
        return f"an integer score {low}-{high}{bands} (unreadable: {step.score.default})"
    if step.extract is not None:
        schema = step.extract.json_schema or {}
        fields = step.extract.fields or schema.get("properties") or {}
        digest = sha256(json.dumps(schema or step.extract.fields, sort_keys=True))
        read = f"file {schema_file[0]}, sha256 {schema_file[1]}; " if schema_file else ""
        return (
            f"fields {', '.join(fields)} (JSON Schema {read}canonical sha256 {digest[:16]}; "
            f"unreadable: {step.extract.default})"
        )
    return "an answer"


def step_facts(
    job: JobPipeline, step: StepSpec, modes: dict[str, str] | None, source: str
) -> list[Fact]:
    """One step's rows: prompts, answer, constraint, sampling, routing."""
    mode = (modes or {}).get(step.name, "off")
    budget = (
        str(step.max_tokens)
        if step.max_tokens is not None
        else "derived from the longest answer its constraint allows"
    )
    routes = ", ".join(f"{label} -> {target}" for label, target in (step.next or {}).items())
    name = f"Step {step.name}"
    return [
        Fact(
            f"{name}: prompts",
            f"{_system(step.system, job.file(step, 'system prompt'))}; user template sha256 "
            f"{sha256(step.user)}, filled with the record's {', '.join(step.fields)}",
            source,
        ),
        Fact(f"{name}: answer", answer_text(step, job.file(step, "JSON Schema")), source),
        Fact(f"{name}: constraint", _constraint(mode), f"{MANIFEST_SOURCE} (constraints)"),
        Fact(
            f"{name}: sampling",
            f"temperature {step.temperature:g}, max_tokens {budget}; other sampling parameters "
            "the server's defaults",
            source,
        ),
        Fact(f"{name}: routing", routes or "the record ends here", source),
    ]


def _system(text: str, file: tuple[str, str] | None) -> str:
    """The system prompt: its file and the sha256 of the file's bytes, or the sha256 of the
    text written in the YAML itself."""
    if not text:
        return "no system prompt"
    if file is not None:
        return f"system prompt file {file[0]}, sha256 {file[1]} ({len(text):,} characters)"
    return f"system prompt in the YAML, sha256 {sha256(text)} ({len(text):,} characters)"


def _constraint(mode: str) -> str:
    if mode == "off":
        return "free answer, read by the parser (not held on the server)"
    return f"held on the server by structured outputs ({mode})"


def pipeline_facts(job: JobPipeline, manifest: Manifest) -> list[Fact]:
    """Every pipeline fact, proven the job's by the manifest's fingerprint."""
    spec = job.spec
    source = f"{job.where} (fingerprint {manifest.pipeline_fingerprint} = {MANIFEST_SOURCE})"
    rows = [
        Fact(
            "Pipeline",
            f"{spec.name}: {len(spec.steps)} step(s), {' -> '.join(s.name for s in spec.steps)} "
            f"(first step {spec.steps[0].name}; served model name {spec.model}); the YAML's "
            f"sha256 {job.yaml_sha256}",
            source,
        )
    ]
    for step in spec.steps:
        rows += step_facts(job, step, manifest.constraints, source)
    return rows


def folder_only_facts(manifest: Manifest, steps_seen: tuple[str, ...]) -> list[Fact]:
    """Without --pipeline: the steps the results name and their constraint modes; the prompts
    and sampling settings are a marked place."""
    if manifest.kind == "openai":
        return [
            Fact(
                "Prompts",
                "each request of the OpenAI batch file carries its own prompt and settings",
                f"{MANIFEST_SOURCE} (kind openai), the input {manifest.input}",
            )
        ]
    modes = manifest.constraints or {}
    rows = [
        Fact(
            "Pipeline",
            f"fingerprint {manifest.pipeline_fingerprint}; steps seen in the results: "
            f"{', '.join(steps_seen) or 'none'}",
            f"{MANIFEST_SOURCE}, results.jsonl",
        )
    ]
    rows += [
        Fact(f"Step {name}: constraint", _constraint(mode), f"{MANIFEST_SOURCE} (constraints)")
        for name, mode in modes.items()
    ]
    rows.append(
        todo(
            "Prompts, answers, sampling, routing",
            "each step's prompts (sha256), choices or schema, temperature and max_tokens, and "
            "routing: the job folder keeps no usable copy of its pipeline; run `sparkops report "
            "DIR --methods --pipeline P.yaml` with the job's pipeline to fill them",
        )
    )
    return rows
