"""The HTTP routes: the parts of OpenAI's Files and Batches API a batch client uses.

    POST   /v1/files                    upload (multipart: file, purpose=batch), as files.create
    GET    /v1/files/{id}               the FileObject
    GET    /v1/files/{id}/content       its bytes (an input, output or error file)
    DELETE /v1/files/{id}               remove it (a batch running on it keeps its own link)
    POST   /v1/batches                  create (the input checked first: 400 with the reason)
    GET    /v1/batches/{id}             the Batch, request_counts read from its job as it runs
    GET    /v1/batches?after=&limit=    newest first, a cursor page
    POST   /v1/batches/{id}/cancel      cancel (a running job stops resumably; the lines it
                                        finished stay in the output and error files)

Every refusal has OpenAI's error shape (`{"error": {message, type, param, code}}`), unknown
routes included, so the `openai` package raises its own typed errors (BadRequestError,
NotFoundError, AuthenticationError). With a key configured, every request must carry it as
`Authorization: Bearer KEY` (what `OpenAI(api_key=...)` sends), compared in constant time;
the key is never echoed.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.typedefs import Handler, Middleware

from sparkops.batch.api import input_check
from sparkops.batch.api.objects import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    ApiError,
    BatchState,
    deleted_file,
    error_body,
    list_object,
    no_such,
    page,
)
from sparkops.batch.api.runner import Runner, log_crash, say
from sparkops.batch.api.store import BATCH_ID, Store, new_batch_id, new_file_id
from sparkops.errors import UserError
from sparkops.files import open_private

CHUNK = 1 << 20
# An uploaded file's name is shown back (FileObject.filename), never used as a path.
FILENAME_MAX = 255
# Form fields of an upload that are accepted and not used: files never expire here.
IGNORED_FIELDS = ("expires_after[anchor]", "expires_after[seconds]")


def make_app(store: Store, runner: Runner, api_key: str | None) -> web.Application:
    """The application: routes, OpenAI-shaped errors, and the key check when one is set."""
    checks: list[Middleware] = [_errors(store), *([_key_check(api_key)] if api_key else [])]
    app = web.Application(middlewares=checks)
    api = Api(store, runner)
    app.router.add_post("/v1/files", api.upload)
    app.router.add_get("/v1/files/{file_id}", api.file)
    app.router.add_get("/v1/files/{file_id}/content", api.content)
    app.router.add_delete("/v1/files/{file_id}", api.delete)
    app.router.add_post("/v1/batches", api.create)
    app.router.add_get("/v1/batches", api.batches)
    app.router.add_get("/v1/batches/{batch_id}", api.batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", api.cancel)
    return app


def _errors(store: Store) -> Middleware:
    """Every refusal in OpenAI's shape: ApiError as raised, aiohttp's 404/405/413 with their
    status, a root that cannot be written (a full disk) as 500 with its one line, and a bug as
    500 with its traceback in ROOT/crash.log (never in the answer, never on the terminal)."""

    @web.middleware
    async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return web.json_response(err.body(), status=err.status)
        except web.HTTPException as err:
            if err.status < 400:
                raise
            message = f"{err.reason}: {request.method} {request.path}"
            if err.status == 404:
                message = f"Invalid URL ({request.method} {request.path})"
            return web.json_response(error_body(message), status=err.status)
        except UserError as err:  # files.WriteFailed: the root cannot be written
            return web.json_response(error_body(str(err), "server_error"), status=500)
        except OSError as err:
            message = f"the server could not write its root ({err.strerror or err}); see its log"
            return web.json_response(error_body(message, "server_error"), status=500)
        except Exception as err:
            route = f"{request.method} {request.path}"
            where = log_crash(store.root, route, err)
            say(f"internal error ({type(err).__name__}) on {route}; {where}")
            message = f"internal error ({type(err).__name__}); please report it ({where})"
            return web.json_response(error_body(message, "server_error"), status=500)

    return answer


def _key_check(api_key: str) -> Middleware:
    expected = f"Bearer {api_key}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization")
        if given is None:
            raise ApiError(
                401,
                "You didn't provide an API key; pass the serving stack's key "
                "(OpenAI(api_key=...), sent as Authorization: Bearer KEY)",
                code="invalid_api_key",
            )
        if not hmac.compare_digest(given.encode(), expected):
            raise ApiError(
                401,
                "Incorrect API key provided; pass the serving stack's key (the one in the "
                "variable the server's --api-key-env names)",
                code="invalid_api_key",
            )
        return await handler(request)

    return check


@dataclass(frozen=True, eq=False)
class Api:
    """The handlers, over the store (files) and the runner (batches)."""

    store: Store
    runner: Runner

    # ---- files ------------------------------------------------------------------------------
    async def upload(self, request: web.Request) -> web.StreamResponse:
        not_a_form = ApiError(
            400,
            "upload the file as multipart/form-data with the fields file and purpose (as "
            "files.create of the openai package sends it)",
        )
        if request.content_type != "multipart/form-data":
            raise not_a_form
        try:
            reader = await request.multipart()
        except (AssertionError, KeyError, ValueError):
            raise not_a_form from None
        temp = self.store.temp_path()
        try:
            fields = await _read_upload(reader, temp)
            if "file" not in fields:
                raise ApiError(400, "Missing required parameter: 'file'.", param="file")
            purpose = fields.get("purpose")
            if purpose is None:
                raise ApiError(400, "Missing required parameter: 'purpose'.", param="purpose")
            if purpose != "batch":
                raise ApiError(
                    400,
                    f"purpose {purpose!r} is not served here; upload batch input files with "
                    "purpose='batch'",
                    param="purpose",
                )
            filename = fields["file"][:FILENAME_MAX] or "upload.jsonl"
            stored = self.store.publish(temp, new_file_id(), filename, "batch")
        finally:
            temp.unlink(missing_ok=True)
        return web.json_response(stored.api())

    async def file(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self._file(request).api())

    async def content(self, request: web.Request) -> web.StreamResponse:
        stored = self._file(request)
        return web.FileResponse(
            self.store.data_path(stored.id), headers={"Content-Type": "application/octet-stream"}
        )

    async def delete(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        if not self.store.delete_file(file_id):
            raise no_such("File", file_id)
        return web.json_response(deleted_file(file_id))

    def _file(self, request: web.Request) -> Any:
        file_id = request.match_info["file_id"]
        stored = self.store.file(file_id)
        if stored is None:
            raise no_such("File", file_id)
        return stored

    # ---- batches ----------------------------------------------------------------------------
    async def create(self, request: web.Request) -> web.StreamResponse:
        params = input_check.create_params(await _json_body(request))
        stored = self.store.file(params.input_file_id)
        if stored is None:
            raise ApiError(
                400,
                f"input_file_id {params.input_file_id!r} names no file here; upload the batch "
                "file first (files.create with purpose='batch') and pass the id it returns",
                param="input_file_id",
            )
        if stored.purpose != "batch":
            raise ApiError(
                400,
                f"file {stored.id} is a batch's output, not an input; upload the input with "
                "purpose='batch'",
                param="input_file_id",
            )
        batch_id = new_batch_id()
        try:
            path = self.store.begin_batch(batch_id, stored.id)
            facts = await asyncio.to_thread(
                input_check.check_input, path, params.endpoint, stored.id
            )
        except BaseException:
            self.store.abandon_batch(batch_id)
            raise
        state = BatchState(
            id=batch_id,
            endpoint=params.endpoint,
            input_file_id=stored.id,
            completion_window=params.completion_window,
            created_ns=time.time_ns(),
            status="in_progress",
            total=facts.total,
            model=facts.model,
            metadata=params.metadata,
            output_expires_after=(
                params.output_expires_after.model_dump() if params.output_expires_after else None
            ),
        )
        try:
            self.runner.add(state)
        except BaseException:
            self.store.abandon_batch(batch_id)
            raise
        return web.json_response(state.api(0, 0))

    async def batch(self, request: web.Request) -> web.StreamResponse:
        state = self._batch(request)
        return web.json_response(state.api(*await self.runner.counts(state)))

    async def batches(self, request: web.Request) -> web.StreamResponse:
        limit = _limit(request.query.get("limit"))
        states = {s.id: s for s in self.runner.newest_first()}
        chosen, more = page(list(states), request.query.get("after"), limit)
        data = [states[i].api(*await self.runner.counts(states[i])) for i in chosen]
        return web.json_response(list_object(data, more))

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        state = self._batch(request)
        self.runner.cancel(state)
        return web.json_response(state.api(*await self.runner.counts(state)))

    def _batch(self, request: web.Request) -> BatchState:
        batch_id = request.match_info["batch_id"]
        state = self.runner.batches.get(batch_id) if BATCH_ID.fullmatch(batch_id) else None
        if state is None:
            raise no_such("Batch", batch_id)
        return state


async def _read_upload(reader: Any, temp: Any) -> dict[str, str]:
    """Stream the form's fields: the file part to `temp` (0600, fsynced), the others as
    text; returns {field: value}, the file's value being its filename."""
    fields: dict[str, str] = {}
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise ApiError(400, "nested multipart forms are not accepted; send one flat form")
        name = part.name or ""
        if name == "file":
            fd = open_private(temp, os.O_WRONLY | os.O_TRUNC)
            try:
                while chunk := await part.read_chunk(CHUNK):
                    _write_all(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
            fields["file"] = part.filename or ""
        elif name == "purpose":
            fields["purpose"] = (await part.text()).strip()
        elif name in IGNORED_FIELDS:
            await part.release()
        else:
            raise ApiError(400, f"Unrecognized request argument supplied: {name}", param=name)
    return fields


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _json_body(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise ApiError(
            400,
            "We could not parse the JSON body of your request; send the batch's parameters "
            "as a JSON object (as batches.create of the openai package does)",
        ) from None


def _limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(
            400, f"limit={text!r}: pass a whole number from 1 to {MAX_LIMIT}", param="limit"
        )
    return limit
