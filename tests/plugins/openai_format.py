"""Parse an OpenAI batch output line as strictly as OpenAI documents it.

The `openai` package has types for the bodies (ChatCompletion, Completion,
CreateEmbeddingResponse) and for the error object (BatchError), but none for the line itself,
so the line is a pydantic model here, written from OpenAI's `BatchRequestOutput` schema, that
refuses any field OpenAI does not write (`extra="forbid"`): a kit field leaking into the line
fails every test that parses output.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types import BatchError, Completion, CreateEmbeddingResponse
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr

BODY_TYPES: dict[str, type[Any]] = {
    "/v1/chat/completions": ChatCompletion,
    "/v1/completions": Completion,
    "/v1/embeddings": CreateEmbeddingResponse,
}


class Response(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status_code: StrictInt
    request_id: StrictStr
    body: dict[str, Any]


class OutputLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: StrictStr
    custom_id: StrictStr | None
    response: Response | None
    error: BatchError | None


def parse_line(raw: str, url: str) -> tuple[OutputLine, Any]:
    """(the line, its body parsed with the openai type for `url`, or None for a failure).

    A success has a 2xx response, `error: null` and a body the openai type accepts. An HTTP
    error has a non-2xx response whose body carries `error`, and `error: null`. A failure
    without an HTTP answer has `response: null` and a BatchError naming code and message.
    """
    line = OutputLine.model_validate(json.loads(raw))
    if line.error is not None:
        assert line.response is None, "error is only for failures without an HTTP answer"
        assert line.error.code and line.error.message
        return line, None
    assert line.response is not None, "a line has a response or an error"
    if 200 <= line.response.status_code < 300:
        return line, BODY_TYPES[url].model_validate(line.response.body)
    assert isinstance(line.response.body.get("error"), dict), line.response.body
    return line, None
