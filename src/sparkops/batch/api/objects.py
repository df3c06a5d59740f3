"""The API's objects as the `openai` package's types define them, and what is kept per file
and per batch (pure: no I/O).

The answers are plain dicts shaped as `openai.types.Batch`, `FileObject`, `FileDeleted` and a
cursor page (`{object: list, data, first_id, last_id, has_more}`), so an unchanged `openai`
script reads them; the tests validate every answer against those types. What the server keeps
is smaller and typed (`StoredFile`, `BatchState`: pydantic, validated when read back from
disk), and the answers are built from it, so a field can never be written one way and read
another.

Errors have OpenAI's shape, `{"error": {message, type, param, code}}`, whose `message` names
the problem and the fix; `ApiError` carries one with its HTTP status.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BatchStatus = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
# A batch in one of these never changes again: its output and error files are fixed bytes.
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled", "expired"})
# What a file is for: an uploaded batch input, or a batch's output or error file.
FilePurpose = Literal["batch", "batch_output"]
# Cursor pages (GET /v1/batches): OpenAI's default and largest page.
DEFAULT_LIMIT = 20
MAX_LIMIT = 100


class ApiError(Exception):
    """A request refused: its HTTP status and OpenAI's error body (`body()`)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """OpenAI's error object: what the `openai` package raises its APIStatusError from."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def no_such(kind: str, object_id: str, param: str = "id") -> ApiError:
    """404 for an id that names nothing here, in OpenAI's words ("No such File object")."""
    return ApiError(404, f"No such {kind} object: {object_id}", param=param)


class StoredFile(BaseModel):
    """What is kept of one file beside its bytes (FILE.json next to FILE.jsonl)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    size: int = Field(ge=0)
    created_at: int
    filename: str
    purpose: FilePurpose

    def api(self) -> dict[str, Any]:
        """The `openai.types.FileObject`: files are processed once stored and never expire."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


def deleted_file(file_id: str) -> dict[str, Any]:
    """The `openai.types.FileDeleted` answer."""
    return {"id": file_id, "object": "file", "deleted": True}


class BatchErrorItem(BaseModel):
    """One `openai.types.BatchError`: why a batch failed (its job stopped or was refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchState(BaseModel):
    """What is kept of one batch (its batch.json); the job folder beside it holds the rest.

    `created_ns` orders the queue (first come, first run) and the list (newest first);
    `completed`/`failed` are the final request counts (a running batch's are read from its
    job folder). Times are Unix seconds, as OpenAI's."""

    model_config = ConfigDict(extra="forbid")

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    created_ns: int
    status: BatchStatus
    total: int = Field(ge=0)
    model: str | None = None
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[BatchErrorItem] | None = None
    completed: int = 0
    failed: int = 0

    @property
    def created_at(self) -> int:
        return self.created_ns // 1_000_000_000

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def api(self, completed: int, failed: int) -> dict[str, Any]:
        """The `openai.types.Batch`, with these request counts. A batch never expires here
        (`expires_at` and `expired_at` stay null: the kit runs it to the end however long)."""
        errors = None
        if self.errors:
            errors = {"object": "list", "data": [e.model_dump() for e in self.errors]}
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": None,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": None,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {"total": self.total, "completed": completed, "failed": failed},
            "metadata": self.metadata,
            "usage": None,
        }


def page(ids: list[str], after: str | None, limit: int) -> tuple[list[str], bool]:
    """One cursor page of `ids` (already in list order): the ids after `after`, at most
    `limit`, and whether more follow. An `after` that names no item is refused (400): a
    client paging with it would otherwise start over and see items twice."""
    start = 0
    if after is not None:
        if after not in ids:
            raise ApiError(
                400,
                f"after={after!r} names no batch here; pass the last id of the previous page",
                param="after",
            )
        start = ids.index(after) + 1
    chosen = ids[start : start + limit]
    return chosen, start + limit < len(ids)


def list_object(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A cursor page as OpenAI writes it (the `openai` package pages on the last `id`)."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
