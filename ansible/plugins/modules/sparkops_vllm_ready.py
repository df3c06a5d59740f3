#!/usr/bin/python
"""Ansible module `sparkops_vllm_ready`: is the served model really answering?

vLLM's /health answers 200 while every request fails in known cases (xxhash missing with
`--prefix-caching-hash-algo xxhash`, a hung engine, a broken chat template), and a container
that died in its first minute leaves a deploy waiting out its whole timeout. This module runs on
the Spark and, in one task:

1. polls GET /health until it answers 200, and stops at once when the serving container has
   exited, is dead or is restarting (its restart count grew), or after `wait` seconds; the
   message then carries the container's log tail without terminal escapes;
2. sends one real chat completion through the served model name (read from /v1/models when not
   given), authenticated with VLLM_API_KEY from the stack's root-only env file, and requires
   text back.

The key is read here, on the host, and never returned or printed. Only the standard library is
used: the module runs with the Spark's own python3. With `fail: false` it reports instead of
failing (preflight.yml judges the result with its other checks).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkops_vllm_ready
short_description: Wait for vLLM's /health, then require one real chat completion
description:
  - Polls /health, stopping early when the container exited or restarts, then sends one chat
    completion through the served model name and requires text back.
options:
  url: {description: vLLM's base URL (no /v1), required: true, type: str}
  container: {description: The serving container to watch ("" none), type: str, default: ""}
  wait: {description: Seconds to wait for /health, type: int, default: 900}
  wait_only_if_starting:
    description: Wait only while the container runs (not for a stopped or absent one).
    type: bool
    default: false
  env_file: {description: Env file holding VLLM_API_KEY ("" none), type: str, default: ""}
  model: {description: Served model name ("" ask /v1/models), type: str, default: ""}
  request: {description: Send the chat completion, type: bool, default: true}
  request_timeout: {description: Seconds for the chat completion, type: int, default: 120}
  max_tokens: {description: Tokens asked for, type: int, default: 8}
  log_lines: {description: Log tail lines in a failure, type: int, default: 40}
  fail: {description: Fail the task on a problem (else only report it), type: bool, default: true}
"""

RETURN = r"""
health: {description: Last /health status (-1 nothing answered), type: int}
waited: {description: Seconds spent waiting for /health, type: float}
container_state: {description: Container status (running, exited, absent, ...), type: str}
model: {description: The model name the request used, type: str}
answered: {description: Whether the chat completion came back with text, type: bool}
reply: {description: The first 80 characters of the reply, type: str}
problem: {description: What is wrong ("" nothing), type: str}
"""

# CSI (colour, cursor) and OSC sequences, then any other control character but tab/newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
STOPPED = ("exited", "dead")
POLL_S = 2.0
PROMPT = "Reply with one short sentence: is the service working?"


def clean_log(text: str) -> str:
    """A log tail a terminal and a playbook print alike: escapes and stray control bytes out,
    carriage-return progress bars reduced to their last state."""
    lines = []
    for line in _ESCAPES.sub("", text).split("\n"):
        lines.append(_CONTROL.sub("", line.rsplit("\r", 1)[-1]).rstrip())
    return "\n".join(line for line in lines if line)


def read_api_key(path: str) -> str:
    """VLLM_API_KEY from a KEY=value env file; "" when the file or the line is absent."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return ""
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "VLLM_API_KEY":
            return env_unquote(value)
    return ""


def env_unquote(raw: str) -> str:
    """A value as compose reads it from the env file the kit renders (sparkops.render.envfile,
    which this module cannot import on the host): double-quoted with `\\`, `\\"` and `$$`
    escaped when it holds more than plain characters, else as written."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r'\\([\\"])|\$\$', lambda m: m.group(1) or "$", raw[1:-1])
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    return raw.replace("$$", "$")


def docker_inspect(name: str, template: str) -> subprocess.CompletedProcess[str] | str:
    """`docker inspect` of the container with a Go template, or why Docker could not be asked
    (no docker command on the host, no answer in 30 s)."""
    try:
        return subprocess.run(
            ["docker", "inspect", "--type", "container", "--format", template, name],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)


def container_state(name: str) -> dict:
    """Docker's .State of the container, {"Status": "absent"} when there is none, or
    {"Status": "unknown", "Error": ...} when Docker cannot be asked."""
    if not name:
        return {"Status": "none"}
    done = docker_inspect(name, "{{json .State}}")
    if isinstance(done, str):
        return {"Status": "unknown", "Error": done}
    if done.returncode != 0:
        if "No such" in done.stderr:
            return {"Status": "absent"}
        return {"Status": "unknown", "Error": done.stderr.strip()}
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {"Status": "unknown", "Error": done.stdout.strip()}


def restart_count(name: str) -> int:
    """How often Docker restarted the container (its policy is unless-stopped); 0 when Docker
    cannot be asked (no docker command on the host: container_state says so)."""
    done = docker_inspect(name, "{{.RestartCount}}")
    if isinstance(done, str) or done.returncode != 0 or not done.stdout.strip():
        return 0
    return int(done.stdout.strip())


def log_tail(name: str, lines: int) -> str:
    """The container's last log lines (stdout and stderr), cleaned; "" without a container."""
    if not name:
        return ""
    try:
        done = subprocess.run(
            ["docker", "logs", "--tail", str(lines), name],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"(docker logs failed: {err})"
    return clean_log(done.stdout + done.stderr)


def http(url: str, key: str, body: dict | None = None, timeout: float = 10) -> tuple[int, str]:
    """(status, text) of a GET, or a POST of ``body`` as JSON; status -1 when nothing answered."""
    headers = {"Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as err:
        return -1, str(getattr(err, "reason", err))


def error_text(text: str) -> str:
    """The message of an OpenAI-shaped error body, else the body's start."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(body, dict) and body.get("detail"):
        return str(body["detail"])[:300]
    return text.strip()[:300]


def reply_text(text: str) -> str:
    """The first choice's message text of a chat completion, "" when there is none."""
    try:
        body = json.loads(text)
        content = body["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
    return content.strip() if isinstance(content, str) else ""


def wait_for_health(params: dict, result: dict) -> str:
    """Poll /health; the problem ("" when it answered 200)."""
    url, name = params["url"].rstrip("/"), params["container"]
    started = time.monotonic()
    restarts = restart_count(name) if name else 0
    while True:
        status, _ = http(f"{url}/health", "", timeout=5)
        state = container_state(name)
        result["health"], result["container_state"] = status, state.get("Status", "unknown")
        result["waited"] = round(time.monotonic() - started, 1)
        if status == 200:
            return ""
        stopped = state.get("Status") in STOPPED
        restarting = state.get("Status") == "restarting" or (
            name and restart_count(name) > restarts
        )
        if stopped or restarting:
            code = state.get("ExitCode")
            how = "is restarting" if restarting else f"exited (code {code})"
            return (
                f"the container {name} {how} {result['waited']:.0f} s into the wait, "
                "before /health answered"
            )
        not_starting = params["wait_only_if_starting"] and state.get("Status") != "running"
        if not_starting or result["waited"] >= params["wait"]:
            answer = f"GET /health -> {status}" if status != -1 else "nothing answered /health"
            return f"not ready after {result['waited']:.0f} s ({url}/health: {answer})"
        time.sleep(POLL_S)


def ask(params: dict, result: dict) -> str:
    """One chat completion through the served model name; the problem ("" when text came)."""
    url = params["url"].rstrip("/")
    key = read_api_key(params["env_file"])
    model = params["model"]
    if not model:
        status, text = http(f"{url}/v1/models", key)
        if status != 200:
            return f"GET /v1/models -> {status}: {error_text(text)}"
        try:
            model = json.loads(text)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            return f"GET /v1/models named no model: {text[:200]}"
    result["model"] = model
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": params["max_tokens"],
        "temperature": 0,
    }
    status, text = http(f"{url}/v1/chat/completions", key, body, params["request_timeout"])
    if status != 200:
        hint = (
            " (the API key in the env file is not the one vLLM runs with)" if status == 401 else ""
        )
        return (
            f"/health answers 200 but a chat completion for {model!r} failed: "
            f"{status} {error_text(text)}{hint}"
        )
    reply = reply_text(text)
    if not reply:
        return f"/health answers 200 but a chat completion for {model!r} came back without text"
    result["answered"], result["reply"] = True, reply[:80]
    return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "container": {"type": "str", "default": ""},
            "wait": {"type": "int", "default": 900},
            "wait_only_if_starting": {"type": "bool", "default": False},
            "env_file": {"type": "str", "default": ""},
            "model": {"type": "str", "default": ""},
            "request": {"type": "bool", "default": True},
            "request_timeout": {"type": "int", "default": 120},
            "max_tokens": {"type": "int", "default": 8},
            "log_lines": {"type": "int", "default": 40},
            "fail": {"type": "bool", "default": True},
        },
        supports_check_mode=True,  # it only reads (one chat completion is a read)
    )
    params = module.params
    result = {
        "changed": False,
        "health": -1,
        "waited": 0.0,
        "container_state": "none",
        "model": params["model"],
        "answered": False,
        "reply": "",
        "problem": "",
    }
    problem = wait_for_health(params, result)
    if not problem and params["request"]:
        problem = ask(params, result)
    result["problem"] = problem
    if problem and params["fail"]:
        tail = log_tail(params["container"], params["log_lines"])
        msg = f"vLLM at {params['url']}: {problem}."
        if tail:
            msg += f" Log tail of {params['container']}:\n{tail}"
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
