"""OpenAI batch output lines, exactly as the OpenAI Batch API and `vllm run-batch` write them.

A user who hands the kit an OpenAI batch file expects `results.jsonl` to be an OpenAI batch
output file: the same code that reads OpenAI's (or `vllm run-batch`'s) output must read ours.
Per line (OpenAI's `BatchRequestOutput`):

- `id` a string, `custom_id` the request's id;
- `response`: `{status_code, request_id, body}` whenever the server answered over HTTP. A
  success carries the server's JSON answer; an HTTP error (400, 401, 404, a 5xx after the
  retries) carries the server's error body (`{"error": {...}}`) with `error: null`, as
  OpenAI writes it. `request_id` is always a string: the server's when it gave one, else one
  of ours;
- `error`: `{code, message, line}` (the `openai` package's `BatchError`) only when there is no
  HTTP answer to show: refused or dropped connections, timeouts, an input line that could not
  be sent, an answer that was not a usable JSON object. `response` is then null.

`vllm run-batch` differs in one respect: it puts an error answer in `error` and leaves
`response.body` null; OpenAI's rule (body in `response`) is the documented one, and the one
clients of the OpenAI API parse, so it is the one followed here.

The kit's own fields (input line, times, run, token counts) stay out of that line. They go to
a side file, `openai-meta.jsonl`, one line per finished request, written right after its
results line: exactly once rests on `results.jsonl` alone (one write per record), and a kill
between the two writes loses at most one record's timing, never a record. The report reads
its times and token counts from the side file; status and resume read `results.jsonl` only.
Whether a line is a success is read by jobdir/lines.py (`outcome`), as for every results line.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from sparkops.jobdir import lines
from sparkops.jobdir.durable import dumps_line, fsync_fd, open_append, write_all
from sparkops.jobdir.folder import META
from sparkops.vocabulary import Kind

# A request succeeded: a 2xx answer whose body is a JSON object, and no error (the rule is
# jobdir/lines.py's, which reads the line back with it).
is_success = lines.answer_ok


def output_line(
    custom_id: str | None,
    line: int,
    status: int,
    body: Any,
    error: str | None,
    request_id: Any = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """One OpenAI batch output line (pure; see the module docstring for the rules).

    `status` is the HTTP status of the last answer, 0 when there was none; `error` the kit's
    message for a failed request (None on success), `kind` its failure's kind as results
    lines write it (`Failure.kind.value`), which names the error code. A 2xx whose body is
    not a JSON object is no answer to show (so the line never reads as a success
    `is_success` refused).
    """
    if error is None and 200 <= status < 300 and not isinstance(body, dict):
        error = f"HTTP {status} answer that is not a JSON object"
    answered = status > 0 and not (200 <= status < 300 and error is not None)
    response = None
    if answered:
        response = {
            "status_code": status,
            "request_id": str(request_id) if request_id else f"sparkops-{uuid.uuid4().hex}",
            "body": body if isinstance(body, dict) else _error_body(status, error),
        }
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": response,
        "error": None if answered else _error_object(status, error, line, kind),
    }


def _error_body(status: int, message: str | None) -> dict[str, Any]:
    """An OpenAI-shaped error body for an HTTP error whose own body was not a JSON object."""
    return {
        "error": {
            "message": message or f"HTTP {status}",
            "type": "http_error",
            "param": None,
            "code": str(status),
        }
    }


# The `BatchError` code of a failure without an HTTP answer, by the failure's kind as results
# lines write it (the kinds that can end a record without one). A call that hung while its
# endpoint answered others (stalled_alone) keeps the code earlier releases wrote.
ERROR_CODES = {
    Kind.TIMEOUT.value: "timeout",
    Kind.TRANSPORT.value: "connection_error",
    Kind.RECORD.value: "invalid_request",  # the line could not become a request
    Kind.STALLED_ALONE.value: "invalid_request",
}


def _error_object(status: int, message: str | None, line: int, kind: str | None) -> dict[str, Any]:
    """OpenAI's `BatchError` for a failure without an HTTP answer."""
    # a 2xx that was not a usable answer, else by kind
    code = "invalid_response" if status else ERROR_CODES.get(kind or "", "invalid_request")
    return {"code": code, "message": message or "request failed", "line": line}


def meta_line(
    custom_id: str | None,
    line: int,
    ok: bool,
    body: Any,
    run: int,
    started: float | None,
    now: float,
) -> dict[str, Any]:
    """The kit's own record of one request, for the report (times, run, token counts)."""
    meta: dict[str, Any] = {
        "custom_id": custom_id,
        "line": line,
        "ok": ok,
        "t0": None if started is None else round(started, 3),
        "t": round(now, 3),
        "run": run,
        "steps": [],
    }
    usage = body.get("usage") if ok and isinstance(body, dict) else None
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        meta["steps"] = [
            {
                "step": "request",
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "cached_tokens": cached,
            }
        ]
    return meta


class MetaWriter:
    """Appends meta lines to the job's side file (opened on first use, 0600).

    Written like results.jsonl (durable.write_all: short writes finished, a full disk stops
    the job with one line), and fsynced when the run ends.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / META
        self._fd: int | None = None

    def append(self, obj: dict[str, Any]) -> None:
        if self._fd is None:
            self._fd = open_append(self.path)
        write_all(self._fd, dumps_line(obj), self.path)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fsync_fd(fd, self.path)
            finally:
                os.close(fd)
