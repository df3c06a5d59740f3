"""OpenAI batch output lines (jobdir/openai_lines.py), each parsed as OpenAI documents it."""

from __future__ import annotations

import json
import stat

import pytest

from sparkops.jobdir import lines, openai_lines
from tests.plugins.openai_format import OutputLine, parse_line

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "tiny",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "yes"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 1,
        "total_tokens": 13,
        "prompt_tokens_details": {"cached_tokens": 8},
    },
}
EMBEDDING = {
    "id": "embd-1",
    "object": "list",
    "created": 1_700_000_000,
    "model": "tiny",
    "data": [{"index": 0, "object": "embedding", "embedding": [0.25, -0.5]}],
    "usage": {"prompt_tokens": 5, "total_tokens": 5},
}
VLLM_ERROR = {  # vLLM's error body (its code is the HTTP status, an integer)
    "error": {"message": "max_tokens must be at least 1", "type": "BadRequestError", "code": 400}
}


def roundtrip(obj):
    """Through JSON exactly as the journal writes it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def test_a_success_is_openai_s_line_with_a_string_request_id():
    line = openai_lines.output_line("c1", 3, 200, CHAT, None, "chatcmpl-1")
    parsed, body = parse_line(roundtrip(line), "/v1/chat/completions")
    assert parsed.custom_id == "c1" and parsed.id.startswith("batch_req_")
    assert parsed.response.status_code == 200 and parsed.response.request_id == "chatcmpl-1"
    assert body.choices[0].message.content == "yes" and parsed.error is None
    assert lines.succeeded(line)
    # a server that gives no id, or a non-string one: still a string
    for given in (None, "", 12345):
        rid = openai_lines.output_line("c1", 3, 200, CHAT, None, given)["response"]["request_id"]
        assert isinstance(rid, str) and rid
    assert openai_lines.output_line("c", 1, 200, CHAT, None, 12345)["response"]["request_id"] == (
        "12345"
    )


def test_an_http_error_keeps_the_server_s_body_in_response_with_error_null():
    line = openai_lines.output_line("c2", 4, 400, VLLM_ERROR, "HTTP 400: max_tokens", None)
    parsed, _ = parse_line(roundtrip(line), "/v1/chat/completions")
    assert parsed.error is None
    assert parsed.response.status_code == 400 and parsed.response.body == VLLM_ERROR
    assert not lines.succeeded(line)
    # a 503 after the retries whose body was not JSON: an OpenAI-shaped error body
    line = openai_lines.output_line("c3", 5, 503, None, "gave up after 9 attempts: HTTP 503", None)
    parsed, _ = parse_line(roundtrip(line), "/v1/chat/completions")
    assert parsed.response.status_code == 503
    assert parsed.response.body["error"]["message"].startswith("gave up after 9 attempts")
    assert not lines.succeeded(line)


@pytest.mark.parametrize(
    ("status", "message", "kind", "code"),
    [
        (0, "connection error: ServerDisconnectedError", "transport", "connection_error"),
        (0, "timed out", "timeout", "timeout"),
        (0, "gave up after 3 attempts: timed out", "timeout", "timeout"),
        (0, "line 7: body must be a JSON object", "record", "invalid_request"),
        (200, "HTTP 200 answer without choices", "no_text", "invalid_response"),
    ],
)
def test_a_failure_without_an_http_answer_is_a_batch_error(status, message, kind, code):
    """The error code comes from the failure's kind, never from its message."""
    line = openai_lines.output_line("c4", 7, status, None, message, None, kind)
    parsed, _ = parse_line(roundtrip(line), "/v1/chat/completions")
    assert parsed.response is None
    assert (parsed.error.code, parsed.error.message, parsed.error.line) == (code, message, 7)
    assert not lines.succeeded(line)


def test_a_2xx_without_a_json_object_is_no_success_written_or_read():
    """The writer's decision (is_success) and the reader's (lines.outcome) are one rule."""
    for body in (None, ["a list"], "text"):
        assert not openai_lines.is_success(200, body, None)
        line = openai_lines.output_line("c5", 8, 200, body, None, "req-5")
        parsed, _ = parse_line(roundtrip(line), "/v1/chat/completions")
        assert parsed.response is None and parsed.error.code == "invalid_response"
        assert parsed.error.message == "HTTP 200 answer that is not a JSON object"
        assert not lines.succeeded(line)
    assert openai_lines.is_success(200, CHAT, None)
    assert lines.succeeded(openai_lines.output_line("c6", 9, 200, CHAT, None, "req-6"))


def test_a_line_without_a_custom_id_is_keyed_by_its_input_line_for_resume():
    line = openai_lines.output_line(None, 9, 0, None, "line 9: not valid JSON", None)
    OutputLine.model_validate(line)
    assert lines.outcome(line).key == lines.LineKey(9)
    assert lines.outcome(openai_lines.output_line("c", 9, 0, None, "x", None)).key == "c"


def test_embeddings_are_served_as_run_batch_serves_them():
    line = openai_lines.output_line("e1", 1, 200, EMBEDDING, None, "embd-1")
    _, body = parse_line(roundtrip(line), "/v1/embeddings")
    assert body.data[0].embedding == [0.25, -0.5]
    meta = openai_lines.meta_line("e1", 1, True, EMBEDDING, 2, 100.0, 101.5)
    assert meta["steps"] == [
        {"step": "request", "prompt_tokens": 5, "completion_tokens": None, "cached_tokens": None}
    ]


def test_the_kit_s_fields_go_to_the_side_file_not_the_line(tmp_path):
    line = openai_lines.output_line("c1", 3, 200, CHAT, None, "chatcmpl-1")
    assert set(line) == {"id", "custom_id", "response", "error"}
    meta = openai_lines.meta_line("c1", 3, True, CHAT, 2, 100.0, 101.5)
    assert meta == {
        "custom_id": "c1",
        "line": 3,
        "ok": True,
        "t0": 100.0,
        "t": 101.5,
        "run": 2,
        "steps": [
            {"step": "request", "prompt_tokens": 12, "completion_tokens": 1, "cached_tokens": 8}
        ],
    }
    assert openai_lines.meta_line("c2", 4, False, VLLM_ERROR, 1, None, 5.0)["steps"] == []
    writer = openai_lines.MetaWriter(tmp_path)
    writer.append(meta)
    writer.append({**meta, "custom_id": "c2"})
    writer.close()
    path = tmp_path / openai_lines.META
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [json.loads(x)["custom_id"] for x in path.read_text().splitlines()] == ["c1", "c2"]


def test_a_full_disk_while_writing_the_side_file_stops_the_job_with_one_line(tmp_path):
    import os

    from sparkops.errors import JobStopped

    writer = openai_lines.MetaWriter(tmp_path)
    writer._fd = os.open("/dev/full", os.O_WRONLY)  # a real device: every write is ENOSPC
    try:
        with pytest.raises(JobStopped, match=r"No space left on device.*run the same command"):
            writer.append(openai_lines.meta_line("c1", 1, False, None, 1, None, 1.0))
    finally:
        os.close(writer._fd)
