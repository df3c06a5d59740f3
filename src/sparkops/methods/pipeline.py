"""The pipeline's facts: each step's prompts (their sha256), what its answer is, its constraint
mode, sampling settings and routing.

The job folder keeps the pipeline's fingerprint (manifest.json) and each step's constraint
mode, not the pipeline itself; `--pipeline P.yaml` gives it, and is refused unless its
fingerprint and modes are the job's, so every fact below is proven to be the job's own. Without
it the steps the results name are listed and the rest is a marked place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sparkops.errors import UserError
from sparkops.jobdir.folder import Manifest
from sparkops.methods.facts import Fact, todo
from sparkops.pipeline import constrain
from sparkops.pipeline.spec import PipelineSpec, StepSpec, load_pipeline

MANIFEST_SOURCE = "manifest.json"


def checked_pipeline(path: Path, manifest: Manifest, directory: Path) -> PipelineSpec:
    """`--pipeline` read and proven to be the job's: its fingerprint and steps' constraint
    modes are the manifest's (refused with both named otherwise)."""
    spec = load_pipeline(path)
    if manifest.kind == "openai":
        raise UserError(
            f"{directory} ran an OpenAI batch file (each line its own request), so no pipeline "
            "describes it; drop --pipeline"
        )
    if spec.fingerprint() != manifest.pipeline_fingerprint:
        raise UserError(
            f"{path} is not the pipeline {directory} ran: its fingerprint is "
            f"{spec.fingerprint()}, the job's {manifest.pipeline_fingerprint} (manifest.json); "
            "pass the pipeline file the job was run with (prompt files as they were then)"
        )
    modes = {name: str(mode) for name, mode in constrain.modes(spec).items()}
    recorded = manifest.constraints
    if recorded is not None and {k: v for k, v in modes.items() if v != "off"} != {
        k: v for k, v in recorded.items() if v != "off"
    }:
        raise UserError(
            f"{path} runs its steps constrained as {_modes(modes)}, but {directory} ran them as "
            f"{_modes(recorded)} (manifest.json); pass the pipeline file the job was run with"
        )
    return spec


def _modes(modes: dict[str, str]) -> str:
    return ", ".join(f"{step}: {mode}" for step, mode in modes.items())


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def answer_text(step: StepSpec) -> str:
    """What a step's answer may be, in words."""
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
        return (
            f"fields {', '.join(fields)} (JSON Schema sha256 {digest[:16]}; unreadable: "
            f"{step.extract.default})"
        )
    return "an answer"


def step_facts(
    spec: PipelineSpec, step: StepSpec, modes: dict[str, str] | None, source: str
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
            f"{_system(step.system)}; user template sha256 {sha256(step.user)}, filled with "
            f"the record's {', '.join(step.fields)}",
            source,
        ),
        Fact(f"{name}: answer", answer_text(step), source),
        Fact(f"{name}: constraint", _constraint(mode), f"{MANIFEST_SOURCE} (constraints)"),
        Fact(
            f"{name}: sampling",
            f"temperature {step.temperature:g}, max_tokens {budget}; other sampling parameters "
            "the server's defaults",
            source,
        ),
        Fact(f"{name}: routing", routes or "the record ends here", source),
    ]


def _system(text: str) -> str:
    if not text:
        return "no system prompt"
    return f"system prompt sha256 {sha256(text)} ({len(text):,} characters)"


def _constraint(mode: str) -> str:
    if mode == "off":
        return "free answer, read by the parser (not held on the server)"
    return f"held on the server by structured outputs ({mode})"


def pipeline_facts(spec: PipelineSpec, manifest: Manifest, path: Path) -> list[Fact]:
    """Every pipeline fact, proven the job's by the manifest's fingerprint."""
    source = f"{path.name} (fingerprint {manifest.pipeline_fingerprint} = {MANIFEST_SOURCE})"
    rows = [
        Fact(
            "Pipeline",
            f"{spec.name}: {len(spec.steps)} step(s), {' -> '.join(s.name for s in spec.steps)} "
            f"(first step {spec.steps[0].name}; served model name {spec.model})",
            source,
        )
    ]
    for step in spec.steps:
        rows += step_facts(spec, step, manifest.constraints, source)
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
            "routing: the job folder keeps only the pipeline's fingerprint; run `sparkops report "
            "DIR --methods --pipeline P.yaml` with the job's pipeline to fill them",
        )
    )
    return rows
