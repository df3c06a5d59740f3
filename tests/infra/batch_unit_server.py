"""A stand-in serving stack for test_batch_unit.py, run on the systemd test host as
`sparkops-serving.service` (enabled, so it comes back after the host reboots, as the kit's
serving unit does). Standard library only: the host's own python3 runs it.

It answers like vLLM serving the sample pipeline's model `tiny`: GET /v1/models, and POST
/v1/chat/completions. The tiny check request (the one `sparkops batch wait-ready` and the
client's start-up check send: "Reply with OK.", max_tokens 1) and the client's probe of the
structured-output constraint (answered with the one choice it allows, as vLLM would) are
answered at once in every mode but `down`; a record's call (any other chat completion) is
answered "no" (a choice the pipeline's first step allows, and stops at), or as MODE_FILE says,
read at every request:

    answer          every call answered "no"
    budget N        N record calls answered in all (COUNT_FILE keeps the count across boots),
                    then each further call held open until the mode changes
    hold            every record call held open until the mode changes
    reject          every record call refused with HTTP 400 (the record's own error)
    down            every request, /v1/models and the check request too, answered 503
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from pathlib import Path

STATE = Path("/var/lib/fake-serving")
MODE_FILE = STATE / "mode"
COUNT_FILE = STATE / "count"
LOCK = threading.Lock()


def mode() -> list[str]:
    try:
        return MODE_FILE.read_text().split() or ["answer"]
    except OSError:
        return ["answer"]


def take_one_from_budget(limit: int) -> bool:
    """Count one record call against the budget; False once it is spent."""
    with LOCK:
        try:
            used = int(COUNT_FILE.read_text() or 0)
        except (OSError, ValueError):
            used = 0
        if used >= limit:
            return False
        COUNT_FILE.write_text(str(used + 1))
        return True


def completion(text: str) -> dict:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
    }


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if mode()[0] == "down":
            self._send(503, {"error": {"message": "loading"}})
        elif self.path.split("?")[0] == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not here"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if mode()[0] == "down":
            self._send(503, {"error": {"message": "loading"}})
            return
        if not self.path.endswith("/chat/completions"):
            self._send(404, {"error": {"message": "not here"}})
            return
        if body.get("max_tokens") == 1:  # the check request: never a record
            self._send(200, completion("OK"))
            return
        allowed = (body.get("structured_outputs") or {}).get("choice") or ["no"]
        if "no" not in allowed:  # the client's probe that the server holds a constraint
            self._send(200, completion(allowed[0]))
            return
        self._record_call()

    def _record_call(self) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            now = mode()
            if now[0] == "answer":
                break
            if now[0] == "reject":
                self._send(400, {"error": {"message": "this record is refused"}})
                return
            if now[0] == "budget" and take_one_from_budget(int(now[1])):
                break
            if now[0] == "down":
                self._send(503, {"error": {"message": "loading"}})
                return
            time.sleep(0.5)  # hold, or a spent budget: keep the call open
        self._send(200, completion("no"))

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    STATE.mkdir(parents=True, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()
