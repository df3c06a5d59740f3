"""The fault server answers what a test scripts (the batch fault tests rest on it)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.plugins.fault_server import (
    FaultServer,
    choice_not_object,
    drop,
    hang,
    no_choices,
    not_json,
    status,
)


def post(server: FaultServer, path: str, body: dict, timeout: float = 5.0):
    req = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def chat(rid: str) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": f"[id:{rid}] x"}]}


def test_scripted_answers_per_record_then_default(fault_server: FaultServer):
    fault_server.script("r1", status(429, retry_after=2), not_json(), no_choices())
    fault_server.script("r2", choice_not_object())
    code, headers, _ = post(fault_server, "/v1/chat/completions", chat("r1"))
    assert code == 429 and headers["Retry-After"] == "2"
    code, _, body = post(fault_server, "/v1/chat/completions", chat("r1"))
    assert code == 200 and body.startswith(b"<html>")
    code, _, body = post(fault_server, "/v1/chat/completions", chat("r1"))
    assert code == 200 and "choices" not in json.loads(body)
    code, _, body = post(fault_server, "/v1/chat/completions", chat("r1"))
    assert json.loads(body)["choices"][0]["message"]["content"] == "no"
    assert json.loads(post(fault_server, "/v1/chat/completions", chat("r2"))[2])["choices"] == [
        "yes"
    ]
    assert fault_server.requests["r1"] == 4 and fault_server.answered["r1"] == 1


def test_drop_hang_and_stall_with_health_up(fault_server: FaultServer):
    fault_server.script("r1", drop())
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        post(fault_server, "/v1/chat/completions", chat("r1"))
    fault_server.override("/tokenize", hang())
    with pytest.raises((TimeoutError, urllib.error.URLError)) as hung:
        post(fault_server, "/tokenize", chat("r2"), timeout=0.5)
    # the client's own timeout ended it, nothing else (a refused connection is no hang)
    assert isinstance(getattr(hung.value, "reason", hung.value), TimeoutError), hung.value
    fault_server.override("/tokenize", None)
    fault_server.stall()
    with urllib.request.urlopen(fault_server.url + "/health", timeout=2) as resp:
        assert resp.status == 200
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        post(fault_server, "/v1/chat/completions", chat("r3"), timeout=0.5)
    fault_server.unstall()
    assert post(fault_server, "/v1/chat/completions", chat("r3"))[0] == 200


def test_stop_refuses_and_start_reopens_the_same_port(fault_server: FaultServer):
    fault_server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(fault_server.url + "/health", timeout=2)
    fault_server.start()
    with urllib.request.urlopen(fault_server.url + "/metrics", timeout=2) as resp:
        assert b"vllm:prompt_tokens_total" in resp.read()
