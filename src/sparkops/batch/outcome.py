"""What one call attempt came to, as data: an `Answer`, or a `Failure` with a kind and a cause.

Every rule that decides a record's fate reads these fields, never a message: retry (is it
worth another attempt?), the endpoint pool (is this endpoint the problem?), fail-fast and the
job's no-answer deadline (do the first failures share one cause? has anything answered?), the
stall rules (a call cancelled because its endpoint stalled is `REROUTED`), and the results
line a finished record gets (`error_kind`).

Whose fault a failure is decides whether it may end a record (docs/batch.md, "Failure kinds
and record fate"):

- The server's (`is_servers_fault`): the connection failed (`TRANSPORT`), no answer in time
  (`TIMEOUT`), a 5xx or 429 or another transient status, 401/403/404/407 (the endpoint's
  configuration: a wrong key or path answers every record alike), a 200 that carries no
  answer text (`NO_TEXT`), a 200 whose answer did not finish (`UNFINISHED`: finish_reason
  `abort`, null or anything but `stop`/`length`), a constrained step's answer outside the
  forms it was held to (`UNHELD`: the server or a router did not hold the constraint; the
  workload judges it, batch/workload.py). Retried; they never end a record on their own, so
  an outage leaves its records unfinished and a resume sends them again.
- The record's (`is_records_fault`): the server refused this request (400, 413, 422 and any
  other 4xx or 501/505 that retrying cannot change), a 200 whose choice is malformed
  (`MALFORMED_ANSWER`), a request the kit cannot build from the record (`RECORD`), or calls
  of this record alone that stall while others advance (`STALLED_ALONE`). These end it.

Pure: no I/O, so the classification is tested on constructed answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from sparkops.batch.retry import is_retryable

# The kinds are shared vocabulary (the job folder writes their values into OpenAI error
# objects): defined in sparkops.vocabulary, the client's name for them stays this one.
from sparkops.vocabulary import Kind as Kind

# The endpoint is wrongly set up (key, path, proxy login): every record gets the same answer.
ENDPOINT_STATUS = frozenset({401, 403, 404, 407})
_NUMBER = re.compile(r"\d+(\.\d+)?")


@dataclass(frozen=True, slots=True)
class Answer:
    """A 200 that carries an answer: its body, the answer text (None for OpenAI batch and
    embeddings, where the kit does not read the text), and what the server said about it."""

    status: int
    body: dict[str, Any]
    text: str | None
    model: str | None
    request_id: str | None
    usage: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Failure:
    """An attempt that brought no answer. `cause` is what the user reads and what errors are
    grouped by (numbers in a server's message masked, so "context 2048" and "context 4000"
    are one cause); `detail` the server's own message, unmasked; `code` the HTTP status
    (0 when there was no answer). `body`: the server's JSON error body, for OpenAI lines."""

    kind: Kind
    cause: str
    code: int = 0
    detail: str = ""
    request_id: str | None = None
    retry_after: float | None = None
    body: dict[str, Any] | None = None
    # The server's kind of failure, but only this record's calls failed while others were
    # answered, for all its retries (or it alone stalled): the record's problem after all.
    alone_after: int = 0

    @property
    def is_servers_fault(self) -> bool:
        """The server's (or the endpoint's) failure: it never ends a record by itself."""
        if self.alone_after:
            return False
        if self.kind is Kind.HTTP_STATUS:
            return is_retryable(self.code) or self.code in ENDPOINT_STATUS
        return self.kind in SERVER_KINDS

    @property
    def is_records_fault(self) -> bool:
        return not self.is_servers_fault

    @property
    def unreachable(self) -> bool:
        """No server there at all (refused, reset): whatever the record, nothing can answer."""
        return self.kind is Kind.TRANSPORT

    @property
    def message(self) -> str:
        """The full sentence for a results line: the cause with the server's own words."""
        if self.kind is Kind.HTTP_STATUS:
            text = f"HTTP {self.code}: {self.detail}" if self.detail else f"HTTP {self.code}"
        else:
            text = self.detail or self.cause
        if self.alone_after:
            # the wording earlier releases wrote (results lines keep it)
            return f"gave up after {self.alone_after} attempts: {text}"
        return text

    def alone(self, attempts: int) -> Failure:
        """This failure, judged the record's own after `attempts` attempts (see alone_after)."""
        return replace(self, alone_after=attempts)


Outcome = Answer | Failure
SERVER_KINDS = frozenset(
    {Kind.TRANSPORT, Kind.TIMEOUT, Kind.NO_TEXT, Kind.REROUTED, Kind.UNFINISHED, Kind.UNHELD}
)

REROUTED = Failure(Kind.REROUTED, "re-routed: its endpoint stalled")
STALLED_ALONE = Failure(
    Kind.STALLED_ALONE,
    "its call made no progress while the endpoint answered a check request (the record's own hang)",
)


def transport_failure(err: BaseException) -> Failure:
    return Failure(Kind.TRANSPORT, f"connection error: {type(err).__name__}")


TIMED_OUT = Failure(Kind.TIMEOUT, "timed out")

# The finish reasons that mean the model finished its answer: at its end, or at max_tokens
# (cut off: counted and warned, batch/truncation.py). Anything else (vLLM's "abort" when a
# request is aborted mid-answer, null, a filter) is no answer at all.
FINISHED = frozenset({"stop", "length"})


def unfinished(reason: str | None) -> Failure:
    """A 200 whose answer did not finish: the server's, retried like a 5xx."""
    said = "no finish_reason" if reason is None else f"finish_reason {reason!r}"
    return Failure(Kind.UNFINISHED, f"HTTP 200 with an unfinished answer ({said})", 200)


def unheld(step: str, mode: str) -> Failure:
    """A constrained step's answer that its constraint does not allow: the server's."""
    allowed = "its choices" if mode == "choice" else "its JSON schema"
    return Failure(
        Kind.UNHELD,
        f"step {step!r}: an answer outside {allowed} (the structured-output constraint did "
        "not hold)",
        200,
    )


def http_failure(
    status: int, body: Any, raw: bytes, request_id: str | None, retry_after: float | None
) -> Failure:
    """A non-200 answer; the cause keeps the status and the server's message, numbers masked."""
    detail = error_message(body, raw)
    cause = f"HTTP {status}" + (": " + _NUMBER.sub("N", detail)[:100] if detail else "")
    return Failure(
        Kind.HTTP_STATUS,
        cause,
        status,
        detail,
        request_id,
        retry_after,
        body if isinstance(body, dict) else None,
    )


def record_failure(message: str) -> Failure:
    """The request cannot be built from the record (a missing field, a bad OpenAI line);
    the cause masks numbers, so "line 12: ..." and "line 80: ..." are one cause."""
    return Failure(Kind.RECORD, _NUMBER.sub("N", message)[:120], detail=message)


def classify_200(path: str, body: Any, request_id: str | None, want_text: bool) -> Outcome:
    """A 200's body: an Answer, or the Failure it is (see `check_answer`)."""
    failure, text = _read_200(path, body, want_text)
    if failure is not None:
        return Failure(failure.kind, failure.cause, 200, request_id=request_id)
    assert isinstance(body, dict)
    usage = body.get("usage")
    model = body.get("model")
    return Answer(
        200,
        body,
        text,
        model if isinstance(model, str) else None,
        body.get("id") or request_id,
        usage if isinstance(usage, dict) else {},
    )


def check_answer(path: str, body: Any, want_text: bool = False) -> Failure | None:
    """What is wrong with a 200's body, or None when it carries an answer.

    A 200 without `choices` (a proxy's page, an empty object) is no decision: `NO_TEXT`,
    retried like a 5xx. A choice that is not an object is `MALFORMED_ANSWER`, the record's.
    With `want_text` (pipeline steps, which route on the text) a choice without text (no
    message, content null, a tool call instead of content, an error object beside it) is
    `NO_TEXT` too; content "" that the model generated is an answer.
    """
    return _read_200(path, body, want_text)[0]


def _read_200(path: str, body: Any, want_text: bool) -> tuple[Failure | None, str | None]:
    """`check_answer`'s verdict and, with `want_text`, the answer's text (read once: this
    runs on every answer)."""
    if not isinstance(body, dict):
        return Failure(Kind.NO_TEXT, "HTTP 200 with a body that is not a JSON object"), None
    if path.endswith("/embeddings"):
        if isinstance(body.get("data"), list):
            return None, None
        return Failure(Kind.NO_TEXT, "HTTP 200 without data"), None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return Failure(Kind.NO_TEXT, "HTTP 200 without choices"), None
    choice = choices[0]
    if not isinstance(choice, dict):
        return Failure(
            Kind.MALFORMED_ANSWER, "HTTP 200 with a malformed choice (not a JSON object)"
        ), None
    if not want_text:
        return None, None
    text = _choice_text(choice)
    if text is None:
        return Failure(Kind.NO_TEXT, "HTTP 200 whose choice has no text"), None
    if not text and (body.get("error") or choice.get("error")):
        return Failure(Kind.NO_TEXT, "HTTP 200 with an error object beside an empty choice"), None
    return None, text


def finish_reason(body: dict[str, Any]) -> str | None:
    """Why the model stopped its first choice ("stop", "length": cut off at max_tokens, ...);
    None when the answer does not say."""
    try:
        reason = body["choices"][0].get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return reason if isinstance(reason, str) else None


def answer_text(body: dict[str, Any]) -> str | None:
    """The text of the first choice (chat `message.content`, or completions `text`); None when
    it has none (content null or not a string, no message, a tool call)."""
    try:
        choice = body["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    return _choice_text(choice) if isinstance(choice, dict) else None


def _choice_text(choice: dict[str, Any]) -> str | None:
    msg = choice.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, str):
        content = choice.get("text")
    return content if isinstance(content, str) else None


def error_message(body: Any, raw: bytes) -> str:
    """The server's message in an error answer (OpenAI's `error.message`, FastAPI's `detail`)."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)[:300]
        return str(err)[:300]
    return raw[:200].decode("utf-8", "replace")
