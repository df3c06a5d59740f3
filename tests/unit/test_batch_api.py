"""`sparkops batch serve`'s pieces without a server: the objects (validated against the
`openai` package's types), the state on disk, the output split and the input checks."""

from __future__ import annotations

import json
import os
import stat
import typing
from pathlib import Path

import pytest
from openai.types import Batch, FileDeleted, FileObject

from sparkops.batch.api import input_check
from sparkops.batch.api.objects import (
    ApiError,
    BatchErrorItem,
    BatchState,
    StoredFile,
    deleted_file,
    error_body,
    list_object,
    page,
)
from sparkops.batch.api.outputs import ResultCounts, split_results
from sparkops.batch.api.store import Store, output_file_ids
from sparkops.errors import UserError
from sparkops.jobdir.openai_lines import output_line
from tests.plugins.fault_server import openai_lines

STATUSES = typing.get_args(Batch.model_fields["status"].annotation)


def state(**changes) -> BatchState:
    base = {
        "id": "batch_abc",
        "endpoint": "/v1/chat/completions",
        "input_file_id": "file-in",
        "completion_window": "24h",
        "created_ns": 1_700_000_000_123_456_789,
        "status": "in_progress",
        "total": 4,
        "model": "tiny",
    }
    return BatchState(**{**base, **changes})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- objects ---------------------------------------------------------------------------------
@pytest.mark.parametrize("status", STATUSES)
def test_every_status_builds_a_batch_the_openai_package_reads(status):
    errors = [BatchErrorItem(code="job_stopped", message="stopped: no endpoint answered")]
    built = state(
        status=status,
        errors=errors if status == "failed" else None,
        metadata={"project": "stroke"},
        output_file_id="file-abc-output",
    ).api(3, 1)
    batch = Batch.model_validate(built)
    assert set(built) <= set(Batch.model_fields), set(built) - set(Batch.model_fields)
    assert batch.status == status and batch.created_at == 1_700_000_000
    assert (batch.request_counts.total, batch.request_counts.completed) == (4, 3)
    assert batch.request_counts.failed == 1 and batch.metadata == {"project": "stroke"}
    assert batch.expires_at is None and batch.expired_at is None  # never expires here
    if status == "failed":
        assert batch.errors.object == "list" and batch.errors.data[0].code == "job_stopped"
    else:
        assert batch.errors is None


def test_a_file_and_its_deletion_are_the_openai_types():
    built = StoredFile(
        id="file-x", size=12, created_at=1, filename="in.jsonl", purpose="batch"
    ).api()
    assert set(built) <= set(FileObject.model_fields)
    got = FileObject.model_validate(built)
    assert (got.bytes, got.purpose, got.status, got.object) == (12, "batch", "processed", "file")
    assert FileDeleted.model_validate(deleted_file("file-x")).deleted is True


def test_errors_have_openai_shape():
    body = ApiError(400, "bad thing; fix it", param="endpoint").body()
    assert body == {
        "error": {
            "message": "bad thing; fix it",
            "type": "invalid_request_error",
            "param": "endpoint",
            "code": None,
        }
    }
    assert error_body("x", "server_error")["error"]["type"] == "server_error"


def test_pages_follow_the_cursor_and_refuse_an_unknown_one():
    ids = ["b5", "b4", "b3", "b2", "b1"]
    assert page(ids, None, 2) == (["b5", "b4"], True)
    assert page(ids, "b4", 2) == (["b3", "b2"], True)
    assert page(ids, "b2", 2) == (["b1"], False)
    assert page(ids, "b1", 2) == ([], False)
    with pytest.raises(ApiError) as err:
        page(ids, "b9", 2)
    assert err.value.status == 400 and err.value.param == "after"
    listed = list_object([{"id": "b5"}, {"id": "b4"}], True)
    assert listed == {
        "object": "list",
        "data": [{"id": "b5"}, {"id": "b4"}],
        "first_id": "b5",
        "last_id": "b4",
        "has_more": True,
    }


# ---- the store -------------------------------------------------------------------------------
def test_the_root_is_private_and_held_by_one_server(tmp_path):
    root = tmp_path / "root"
    store = Store.open(root)
    try:
        assert mode(root) == mode(root / "files") == mode(root / "batches") == 0o700
        assert mode(root / "lock") == 0o600
        with pytest.raises(UserError) as err:
            Store.open(root)
        assert f"pid {os.getpid()}" in str(err.value) and "--root" in str(err.value)
    finally:
        store.close()
    Store.open(root).close()  # free again once the first one closed


def upload(store: Store, text: str, name: str = "in.jsonl") -> StoredFile:
    temp = store.temp_path()
    temp.write_text(text)
    return store.publish(temp, f"file-{name.replace('.', '')}", name, "batch")


def test_files_are_published_read_and_deleted(tmp_path):
    store = Store.open(tmp_path / "root")
    stored = upload(store, "{}\n")
    assert store.file(stored.id) == stored and stored.size == 3
    assert mode(store.data_path(stored.id)) == 0o600
    assert mode(store.files / f"{stored.id}.json") == 0o600
    assert not list(store.files.glob(".*.tmp"))
    assert store.delete_file(stored.id) is True
    assert store.file(stored.id) is None and not store.data_path(stored.id).exists()
    assert store.delete_file(stored.id) is False
    store.close()


def test_an_id_never_names_a_path_outside_the_root(tmp_path):
    store = Store.open(tmp_path / "root")
    (tmp_path / "secret.json").write_text("{}")
    for bad in ("../secret", "file-../../secret", "file-x/../../secret", ""):
        assert store.file(bad) is None
    with pytest.raises(ValueError):
        store.batch_dir("../../etc")
    store.close()


def test_a_batch_keeps_its_input_when_the_upload_is_deleted(tmp_path):
    store = Store.open(tmp_path / "root")
    stored = upload(store, "line\n")
    path = store.begin_batch("batch_one", stored.id)
    assert path.stat().st_ino == store.data_path(stored.id).stat().st_ino  # a link, no copy
    store.delete_file(stored.id)
    assert path.read_text() == "line\n"
    store.close()


def test_batches_are_read_back_and_half_made_ones_removed(tmp_path):
    store = Store.open(tmp_path / "root")
    stored = upload(store, "line\n")
    store.begin_batch("batch_kept", stored.id)
    kept = state(id="batch_kept", metadata={"k": "v"})
    store.save_batch(kept)
    assert mode(store.batch_dir("batch_kept") / "batch.json") == 0o600
    store.begin_batch("batch_halfmade", stored.id)  # a create that never answered
    (store.files / ".upload-dead.tmp").write_text("partial")
    store.close()

    store = Store.open(tmp_path / "root")
    assert store.load_batches() == [kept]
    assert not store.batch_dir("batch_halfmade").exists()
    assert not (store.files / ".upload-dead.tmp").exists()
    store.close()


def test_a_corrupt_batch_json_refuses_the_start_naming_it(tmp_path):
    store = Store.open(tmp_path / "root")
    store.batch_dir("batch_bad").mkdir()
    (store.batch_dir("batch_bad") / "batch.json").write_text('{"id": "batch_bad", "sta')
    with pytest.raises(UserError) as err:
        store.load_batches()
    assert "batch_bad/batch.json" in str(err.value) and "move" in str(err.value)
    store.close()


def test_output_ids_are_fixed_by_the_batch():
    assert output_file_ids("batch_abc") == ("file-abc-output", "file-abc-errors")


# ---- outputs ---------------------------------------------------------------------------------
def results_lines() -> list[dict]:
    chat = {"id": "c", "object": "chat.completion", "choices": [], "model": "tiny"}
    bad = {"error": {"message": "too long", "type": "BadRequestError"}}
    return [
        output_line("r1", 1, 200, chat, None, "req-1"),
        output_line("r2", 2, 400, bad, "HTTP 400: too long", "req-2", "http_status"),
        output_line("r3", 3, 0, None, "connection refused", None, "transport"),
        output_line("r4", 4, 200, chat, None, "req-4"),
    ]


def test_results_split_into_output_and_error_files_each_id_once(tmp_path):
    written = results_lines()
    results = tmp_path / "results.jsonl"
    repeated = {**written[0], "id": "batch_req_again"}  # a record finished twice: first counts
    results.write_text("".join(json.dumps(x) + "\n" for x in [*written, repeated]) + "not json\n")
    out, err = tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    assert split_results(results, out, err) == (2, 2)
    got_out = [json.loads(x) for x in out.read_text().splitlines()]
    got_err = [json.loads(x) for x in err.read_text().splitlines()]
    assert [x["custom_id"] for x in got_out] == ["r1", "r4"]
    assert [x["custom_id"] for x in got_err] == ["r2", "r3"]
    assert got_out[0] == written[0]  # the line as the job wrote it, not the repeat
    assert got_err[0]["response"]["status_code"] == 400 and got_err[1]["error"]["code"]
    assert mode(out) == mode(err) == 0o600


def test_a_job_that_never_ran_splits_into_nothing(tmp_path):
    out, err = tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    assert split_results(tmp_path / "missing.jsonl", out, err) == (0, 0)
    assert out.read_text() == err.read_text() == ""


def test_running_counts_follow_the_journal_as_it_grows(tmp_path):
    results = tmp_path / "results.jsonl"
    counts = ResultCounts(results)
    assert counts.update() == (0, 0)
    lines = [json.dumps(x) + "\n" for x in results_lines()]
    results.write_text(lines[0] + lines[1][:20])  # the second line still being written
    assert counts.update() == (1, 0)
    with results.open("a") as fh:
        fh.write(lines[1][20:] + lines[2] + lines[0])  # r1 again: counted once
    assert counts.update() == (1, 2)
    results.write_text(lines[3])  # a file that shrank is read again
    assert counts.update() == (1, 0)


# ---- input checks ----------------------------------------------------------------------------
GOOD = {"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h"}


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({**GOOD, "input_file_id": None}, "input_file_id", "Invalid value for 'input_file_id'"),
        ({k: v for k, v in GOOD.items() if k != "endpoint"}, "endpoint", "Missing required"),
        ({**GOOD, "priority": "high"}, "priority", "Unrecognized request argument"),
        ({**GOOD, "completion_window": "48h"}, "completion_window", "use '24h'"),
        ({**GOOD, "endpoint": "/v1/responses"}, "endpoint", "/v1/chat/completions"),
        ({**GOOD, "metadata": {str(i): "v" for i in range(17)}}, "metadata", "at most 16"),
        ({**GOOD, "metadata": {"k": "v" * 513}}, "metadata", "longer than"),
    ],
)
def test_a_create_request_is_refused_naming_the_parameter(body, param, words):
    with pytest.raises(ApiError) as err:
        input_check.create_params(body)
    assert err.value.status == 400 and err.value.param == param
    assert words in err.value.message


def test_a_create_request_with_expiry_settings_is_accepted():
    params = input_check.create_params(
        {**GOOD, "output_expires_after": {"anchor": "created_at", "seconds": 3600}}
    )
    assert params.output_expires_after is not None and params.metadata is None


def refused(path: Path, endpoint: str = "/v1/chat/completions") -> str:
    with pytest.raises(ApiError) as err:
        input_check.check_input(path, endpoint, "file-up")
    assert err.value.status == 400 and err.value.param == "input_file_id"
    assert str(path.parent) not in err.value.message  # the upload's id, never a server path
    return err.value.message


def test_a_good_file_gives_its_count_and_model(tmp_path):
    path = tmp_path / "input.jsonl"
    openai_lines(path, 5, model="tiny")
    facts = input_check.check_input(path, "/v1/chat/completions", "file-up")
    assert (facts.total, facts.model) == (5, "tiny")


def test_duplicate_custom_ids_are_refused(tmp_path):
    path = tmp_path / "input.jsonl"
    openai_lines(path, 3)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[1]]) + "\n")
    message = refused(path)
    assert "duplicate" in message and "'r2'" in message and "file file-up" in message


def test_a_line_for_another_endpoint_is_refused_naming_it(tmp_path):
    path = tmp_path / "input.jsonl"
    openai_lines(path, 3)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[1]["url"] = "/v1/embeddings"
    lines[2]["method"] = "GET"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    message = refused(path)
    assert message.startswith("2 line(s) of file file-up")
    assert "line 2: url '/v1/embeddings' is not the batch's endpoint" in message
    assert "line 3: method must be POST" in message


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "is not an OpenAI batch file"),
        (b'{"id": "a", "text": "a note"}\n', "is not an OpenAI batch file"),
        (b'{"custom_id": "a", "body": {}, "url": "/v1/chat/completions"}\n{"body": {}}\n',
         "have no custom_id"),
        (b'{"custom_id": "a", "body": {}, "url": "/v1/chat/completions"}\n\xff\xfe\n',
         "is not UTF-8"),
    ],
)  # fmt: skip
def test_a_file_the_job_would_refuse_is_refused_first(tmp_path, content, words):
    path = tmp_path / "input.jsonl"
    path.write_bytes(content)
    assert words in refused(path)
