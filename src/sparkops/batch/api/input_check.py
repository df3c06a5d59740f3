"""A create-batch request and its input file, checked before anything runs.

POST /v1/batches is refused (400, OpenAI's error shape, `message` naming the problem and the
fix) rather than accepted and failed later: the researcher's `batches.create` raises at once
with the reason, and a batch that exists always has an input the job accepts. The file gets
the checks `sparkops batch run` makes before any request (batch/records.py: UTF-8, JSON
objects, a custom_id on every line, no custom_id twice) and OpenAI's own rules for a batch
file: every line a POST to the batch's endpoint with a JSON object body, not streamed.
Several problems are named together (the first five), so one round of fixes is enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparkops.batch.api.objects import ApiError
from sparkops.batch.records import (
    OPENAI_URLS,
    InputProblem,
    InputSource,
    Record,
    detect_kind,
)
from sparkops.errors import UserError

SHOWN = 5
# OpenAI's bounds on a batch's metadata.
METADATA_PAIRS = 16
METADATA_KEY = 64
METADATA_VALUE = 512


class OutputExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")
    anchor: Literal["created_at"]
    seconds: int = Field(ge=3600, le=2_592_000)


class CreateParams(BaseModel):
    """The body of POST /v1/batches (`openai.types.BatchCreateParams`)."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: OutputExpiresAfter | None = None


def create_params(body: Any) -> CreateParams:
    """The request's parameters, or a 400 naming the first wrong one as OpenAI words it."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object of the batch's parameters")
    try:
        params = CreateParams.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(x) for x in first["loc"])
        if first["type"] == "missing":
            message = f"Missing required parameter: '{param}'."
        elif first["type"] == "extra_forbidden":
            message = f"Unrecognized request argument supplied: {param}"
        else:
            message = f"Invalid value for '{param}': {first['msg']}."
        raise ApiError(400, message, param=param) from None
    if params.endpoint not in OPENAI_URLS:
        raise ApiError(
            400,
            f"endpoint {params.endpoint!r} is not served here; use one of "
            f"{', '.join(OPENAI_URLS)} (what `sparkops batch run` sends)",
            param="endpoint",
        )
    if params.completion_window != "24h":
        raise ApiError(
            400,
            f"completion_window {params.completion_window!r} is not supported; use '24h' (the "
            "only window OpenAI accepts; here a batch runs to the end and never expires)",
            param="completion_window",
        )
    _check_metadata(params.metadata)
    return params


def _check_metadata(metadata: dict[str, str] | None) -> None:
    if not metadata:
        return
    if len(metadata) > METADATA_PAIRS:
        raise ApiError(
            400, f"metadata has {len(metadata)} pairs; at most {METADATA_PAIRS}", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > METADATA_KEY or len(value) > METADATA_VALUE:
            raise ApiError(
                400,
                f"metadata key {key[:METADATA_KEY]!r}... is longer than {METADATA_KEY} characters "
                f"or its value longer than {METADATA_VALUE}; shorten it",
                param="metadata",
            )


@dataclass(frozen=True)
class InputFacts:
    """What a checked input file holds: its request count and the model its first line asks."""

    total: int
    model: str | None


def check_input(path: Path, endpoint: str, file_id: str) -> InputFacts:
    """Refuse (400) an input the job would refuse, or whose lines break OpenAI's rules for a
    batch on `endpoint`. Messages name the upload by its id, never a path of the server."""
    try:
        if detect_kind(path) != "openai":
            raise ApiError(
                400,
                f"file {file_id} is not an OpenAI batch file: its first line needs custom_id, "
                "method, url and body ({custom_id, method: POST, url, body: {model, ...}}); "
                "upload one request per line",
                param="input_file_id",
            )
        source = InputSource.scan(path, "openai", "custom_id")
        problems = _line_problems(source, endpoint)
    except UserError as err:
        message = str(err).replace(str(path), f"file {file_id}")
        raise ApiError(400, message, param="input_file_id") from None
    if problems:
        shown = "; ".join(problems[:SHOWN]) + ("; ..." if len(problems) > SHOWN else "")
        raise ApiError(
            400,
            f"{len(problems)} line(s) of file {file_id} cannot run in a batch for {endpoint}: "
            f"{shown}; fix them and upload the file again (nothing was run)",
            param="input_file_id",
        )
    first = source.first_record()
    model = first.fields["body"].get("model") if first is not None else None
    return InputFacts(source.total, model if isinstance(model, str) else None)


def _line_problems(source: InputSource, endpoint: str) -> list[str]:
    """Every line that is not a POST of a JSON object to `endpoint` (the kit's own check of
    the line, then OpenAI's rule that every line's url is the batch's endpoint)."""
    problems = []
    for item in source.records():
        if isinstance(item, InputProblem):
            problems.append(item.message)
        elif isinstance(item, Record) and item.fields.get("url") != endpoint:
            url = item.fields.get("url")
            problems.append(
                f"line {item.line}: url {url!r} is not the batch's endpoint {endpoint!r} (every "
                "line's url must be the endpoint the batch was created with)"
            )
    return problems
