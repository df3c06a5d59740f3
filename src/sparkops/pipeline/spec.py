"""The pipeline YAML, validated with pydantic before any request is sent.

A pipeline is a short sequence of decisions (a quick screen, then detailed checks only for
records that pass). Every mistake a user can make in the YAML (unknown step in `next`, a
loop, a label with no route, a missing prompt file) is caught here, with the fix named,
so a multi-day job never dies on step three after hours of work.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sparkops.errors import UserError
from sparkops.inputs import read_yaml
from sparkops.pipeline.extract import ExtractSpec, resolve_schema_file, schema_path
from sparkops.pipeline.kinds import FREE_TEXT_MAX_TOKENS as FREE_TEXT_MAX_TOKENS
from sparkops.pipeline.kinds import AnswerKind
from sparkops.pipeline.parse import ParseSpec as ParseSpec
from sparkops.pipeline.score import ScoreSpec

STOP = "stop"
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# `{name}` in a system prompt: a record field the user meant to fill (JSON examples such as
# `{"age": 5}` are not matched).
_SYSTEM_FIELD = re.compile(r"(?<!\{)\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}(?!\})")


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader where only true/false are booleans.

    YAML 1.1 reads `yes`/`no`/`on`/`off` as booleans, which would silently turn the
    natural `choices: [yes, no]` and `next: {yes: detail}` into True/False.
    """


_YamlLoader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


class StepSpec(BaseModel):
    """One step: a fixed system prompt, a user template filled from the record, and what the
    answer is (`answer`, pipeline/kinds.py): one of `parse`'s choices (a decision),
    `extract`'s fields (pipeline/extract.py) or a `score` in a range (pipeline/score.py).

    `constrain` (default: the pipeline's, itself default true) holds the answer to those
    choices or that schema on the server (pipeline/constrain.py); `max_tokens` left unset is
    then derived from the longest answer the constraint allows.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    system: str = ""
    user: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    parse: ParseSpec | None = None
    extract: ExtractSpec | None = None
    score: ScoreSpec | None = None
    constrain: bool | None = None
    next: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_answer_kind(self) -> StepSpec:
        if len(self._kinds()) != 1:
            raise ValueError(
                "a step reads its answer one way: give it parse: {choices: [...]} (a decision), "
                "extract: {fields: {...}} (fields to extract) or score: {range: [1, 5]} (a "
                "score), one of them, not both or neither"
            )
        return self

    def _kinds(self) -> list[AnswerKind]:
        kinds: list[AnswerKind | None] = [self.parse, self.extract, self.score]
        return [kind for kind in kinds if kind is not None]

    @property
    def answer(self) -> AnswerKind:
        """What this step's answer is (pipeline/kinds.py): every rule that depends on the
        kind of answer asks it."""
        (kind,) = self._kinds()
        return kind

    @property
    def labels(self) -> list[str]:
        """Every label the step's answer can become (what `next` routes on)."""
        return self.answer.labels

    @property
    def default(self) -> str:
        """The label an answer that cannot be read takes."""
        return self.answer.default

    @field_validator("system")
    @classmethod
    def _not_a_template(cls, v: str) -> str:
        """A system prompt is sent as written, the same for every record (the shared prefix
        the server's cache reuses): `{age}` in it would reach the model as the word "{age}"."""
        field = _SYSTEM_FIELD.search(v)
        if field is not None:
            raise ValueError(
                f"the system prompt has {field.group(0)}, which looks like a record field, but "
                "a system prompt is not a template: it is sent as written to every record; "
                f"put {field.group(0)} in the step's user template (or reword the system prompt "
                "without braces around a single word)"
            )
        return v

    @field_validator("user")
    @classmethod
    def _simple_fields(cls, v: str) -> str:
        fields = template_fields(v)
        for field in fields:
            if not _FIELD_NAME.match(field):
                raise ValueError(
                    f"placeholder {{{field}}} is not a plain record field name; "
                    "use {fieldname} (no attribute access, indexing or format specs)"
                )
        if (fancy := _formatted_field(v)) is not None:
            # a conversion or format spec ({text!r}, {text:>{id}}: a nested field) formats
            # a record's text in ways a prompt never needs, and a nested one reads a field
            # the record may lack at send time
            raise ValueError(
                f"placeholder {fancy} has a conversion or format spec; use {{fieldname}} "
                "(no attribute access, indexing or format specs)"
            )
        if not fields:
            # every record would be sent the same prompt: no record text reaches the model
            hint = (
                " (user: is the template itself, not a file name, unlike system:)"
                if looks_like_path(v)
                else ""
            )
            raise ValueError(
                f"the user template {v.strip()[:60]!r} names no record field, so every record "
                f"would get the same prompt{hint}; put the record's fields in it, e.g. "
                "'Note: {text}'"
            )
        return v

    @property
    def fields(self) -> list[str]:
        """Record fields this step's user template reads."""
        return template_fields(self.user)


class PipelineSpec(BaseModel):
    """The whole pipeline: a served model name and an ordered list of steps."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model: str
    constrain: bool = True
    steps: list[StepSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _routes(self) -> PipelineSpec:
        names = [s.name for s in self.steps]
        if len(set(names)) != len(names):
            raise ValueError(f"step names must be unique, got {names}")
        for step in self.steps:
            if (problem := step.answer.problem(step.name, self.constrained(step))) is not None:
                raise ValueError(problem)
            if step.next is None:
                continue
            for label, target in step.next.items():
                if label not in step.labels:
                    raise ValueError(
                        f"step {step.name!r}: next has label {label!r} that parse cannot "
                        f"return; labels are {step.labels}"
                    )
                if target != STOP and target not in names:
                    raise ValueError(
                        f"step {step.name!r}: next sends {label!r} to unknown step "
                        f"{target!r}; use one of {names} or 'stop'"
                    )
            missing = [lb for lb in step.labels if lb not in step.next]
            if missing:
                raise ValueError(
                    f"step {step.name!r}: next has no route for {missing}; add them "
                    "(a step name or 'stop')"
                )
        self._check_acyclic()
        return self

    def _check_acyclic(self) -> None:
        """Refuse loops: a record must finish in at most len(steps) calls."""
        state: dict[str, int] = {}

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                raise ValueError(f"steps form a loop: {' -> '.join([*path, name])}; remove it")
            state[name] = 1
            for target in successors(self, name):
                visit(target, [*path, name])
            state[name] = 2

        visit(self.steps[0].name, [])

    def step(self, name: str) -> StepSpec:
        """The step called `name`."""
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def first(self) -> StepSpec:
        return self.steps[0]

    def fingerprint(self) -> str:
        """Hash of everything that changes what is sent or how answers are read.

        A resumed job with a different fingerprint would mix two experiments in one
        results file, so the journal refuses it.
        """
        dump = self.model_dump(mode="json", exclude={"constrain"})
        for step in dump["steps"]:
            # the constraint mode is the manifest's own field (a change of mode is refused
            # by name), and the keys added with constraining are left out while unused, so
            # a pipeline written before them keeps its fingerprint (its jobs still resume)
            step.pop("constrain", None)
            for kind in ("extract", "score"):  # kinds added later: absent while unused
                if step.get(kind) is None:
                    step.pop(kind, None)
            if step.get("max_tokens") is None and step.get("parse") is not None:
                step["max_tokens"] = FREE_TEXT_MAX_TOKENS
        blob = json.dumps(dump, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def constrained(self, step: StepSpec) -> bool:
        """Whether `step`'s answers are held on the server (the step's switch, else the
        pipeline's)."""
        return self.constrain if step.constrain is None else step.constrain


def successors(spec: PipelineSpec, name: str) -> list[str]:
    """Steps reachable in one hop from `name` (stop excluded)."""
    idx = [s.name for s in spec.steps].index(name)
    step = spec.steps[idx]
    if step.next is None:
        return [spec.steps[idx + 1].name] if idx + 1 < len(spec.steps) else []
    return sorted({t for t in step.next.values() if t != STOP})


def _formatted_field(template: str) -> str | None:
    """The first placeholder of `template` with a conversion (`!r`) or a format spec (`:>9`,
    a nested `{field}` in it too), written as in the template; None when there is none."""
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is not None and (spec or conversion):
            return (
                "{"
                + name
                + (f"!{conversion}" if conversion else "")
                + (f":{spec}" if spec else "")
                + "}"
            )
    return None


def template_fields(template: str) -> list[str]:
    """Names of the `{field}` placeholders in a str.format template, in order."""
    return list(_template_fields(template))


@functools.lru_cache(maxsize=1024)
def _template_fields(template: str) -> tuple[str, ...]:
    """Parsed once per template: every call of every record asks (about 1/6 of the client's
    CPU per request when parsed each time)."""
    try:
        return tuple(f for _, f, _, _ in string.Formatter().parse(template) if f is not None)
    except ValueError as err:
        raise ValueError(
            f"bad template {template!r}: {err}; write literal braces as {{{{ }}}}"
        ) from err


_PROMPT_FILE_EXT = re.compile(r"\.(txt|md|markdown|prompt|text|j2|jinja2?)$", re.IGNORECASE)
_ONE_TOKEN_PATH = re.compile(r"^[\w.~/\\-]+$")


def looks_like_path(text: str) -> bool:
    """Whether a `system:` value names a file rather than being the prompt itself.

    A prompt is a sentence; a file name is one token. So: a single line that is one token of
    path characters (`prompts/screen`, `screen.prompt`, `screen_prompt`; but not
    `Classify.` or `yes/no?`), or any single line ending in a prompt-file extension
    (`my prompts/screen.txt`). Such a value that names no file is an error, never sent as
    the prompt text.
    """
    if "\n" in text or not text.strip() or len(text) >= 300:
        return False
    text = text.strip()
    if _PROMPT_FILE_EXT.search(text):
        return True
    return bool(_ONE_TOKEN_PATH.match(text)) and not text.endswith(".")


def system_path(text: str, base: Path) -> Path:
    """The file a path-like `system:` value names (relative to the YAML's folder `base`)."""
    return (base / Path(text.strip()).expanduser()).resolve()


def _resolve_system(text: str, base: Path, instead: Path | None = None) -> str:
    """`system` is a path relative to the YAML, or inline text (see looks_like_path);
    `instead`: the file to read for it (a job folder's saved copy)."""
    if not looks_like_path(text):
        return text
    candidate = instead if instead is not None else system_path(text, base)
    if candidate.is_file():
        try:
            prompt = candidate.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
            raise UserError(
                f"system prompt file {candidate} cannot be read ({reason}); fix the file"
            ) from None
        if not prompt.strip():
            raise UserError(
                f"system prompt file {candidate} is empty; write the step's instructions in "
                "it (or drop system: from the step)"
            )
        return prompt
    where = "is a folder, not a file" if candidate.is_dir() else "was not found"
    raise UserError(
        f"system: {text.strip()!r} names a prompt file, but {candidate} {where}; create the "
        "file (relative to the pipeline YAML), or write the prompt inline as a sentence"
    )


def _read_raw(path: Path) -> dict[str, Any]:
    raw: dict[str, Any] = read_yaml(
        path,
        what="pipeline",
        fix="pass --pipeline PATH to a YAML mapping with name, model, steps",
        loader=_YamlLoader,
    )
    return raw


def load_pipeline(path: str | Path, files: Mapping[str, Path] | None = None) -> PipelineSpec:
    """Read, resolve prompt files and validate a pipeline YAML.

    `files`: a prompt or schema file's name as the YAML writes it -> the file to read in its
    place (a job folder's saved copy of its pipeline, methods/saved.py)."""
    path, files = Path(path), files or {}
    raw = _read_raw(path)
    for step in raw.get("steps") or []:
        if isinstance(step, dict) and isinstance(system := step.get("system"), str):
            step["system"] = _resolve_system(system, path.parent, files.get(system))
        if isinstance(step, dict) and isinstance(extract := step.get("extract"), dict):
            if isinstance(schema := extract.get("schema"), str) and schema in files:
                extract["schema"] = str(files[schema])
            resolve_schema_file(extract, path.parent)
    return parse_pipeline(raw, source=str(path))


@dataclass(frozen=True)
class NamedFile:
    """A file a pipeline YAML names: a step's system prompt or JSON Schema."""

    step: str
    role: str  # "system prompt" or "JSON Schema"
    named: str  # as the YAML writes it
    path: Path  # the file load_pipeline reads for it


def named_files(path: Path) -> list[NamedFile]:
    """Every file the YAML's steps name, resolved as load_pipeline resolves them: what a job
    folder keeps a copy of beside the YAML (call it on a pipeline load_pipeline accepted)."""
    out = []
    for step in _read_raw(path).get("steps") or []:
        if not isinstance(step, dict):
            continue
        name = str(step.get("name"))
        if isinstance(system := step.get("system"), str) and looks_like_path(system):
            out.append(NamedFile(name, "system prompt", system, system_path(system, path.parent)))
        extract = step.get("extract")
        if isinstance(extract, dict) and isinstance(schema := extract.get("schema"), str):
            out.append(NamedFile(name, "JSON Schema", schema, schema_path(schema, path.parent)))
    return out


def parse_pipeline(raw: dict[str, Any], source: str = "pipeline") -> PipelineSpec:
    """Validate an already-loaded mapping (prompt paths already resolved)."""
    try:
        return PipelineSpec.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'pipeline'}: {e['msg']}" for e in err.errors()
        )
        raise UserError(f"{source} is invalid: {problems}") from None
