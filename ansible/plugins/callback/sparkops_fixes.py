"""Ansible callback `sparkops_fixes`: one line with the fix when a play fails for SSH or sudo.

A new Spark stops a first run in one of two ways Ansible words for its own experts: a DGX OS
account needs a password for sudo (every play runs with `become: true`), and Ansible says
"Missing sudo password"; or the controller's SSH key is not on the Spark, and the host is
"UNREACHABLE! ... Permission denied (publickey,password)". Neither message names the fix.
This callback recognises them (and a wrong sudo password, an unknown host key, a refused or
timed-out connection) in the results Ansible hands every callback, and prints one line after
Ansible's own, naming the host and the fix:

    sparkops: spark-1: sudo asks for a password: run again with -K (--ask-become-pass) ...

A refused or timed-out connection is SSH's only when the host was unreachable (or Ansible says
"via ssh"), and the line names the port SSH tried. A task that reached the host and failed
because something there did not answer (vLLM's /health on its port, a URL the task asked) gets
a line naming that URL and saying SSH worked (issue 43 item 6): it never blames SSH.

It changes nothing else: no option, no other output. It needs no enabling
(CALLBACK_NEEDS_ENABLED is false): Ansible loads it from ansible/playbooks/callback_plugins,
a link to this folder, for every kit playbook, with or without the kit's ansible.cfg.
The guide is docs/provision.md, "SSH and sudo".
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from ansible.plugins.callback import CallbackBase

GUIDE = "docs/provision.md, 'SSH and sudo'"
SERVING_GUIDE = "docs/deploy.md, 'When the deploy stops'"
SSH_UNREACHABLE = re.compile(
    r"Connection refused|Connection timed out|No route to host|"
    r"Could not resolve hostname|Name or service not known",
    re.I,
)
# (pattern over Ansible's message, the fix with {host} {user} {address}), first match wins.
FIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"Missing (sudo|become) password|sudo: a password is required", re.I),
        "sudo asks for a password: run again with -K (--ask-become-pass) and type it, or give "
        "{user} a sudoers rule (sudo visudo -f /etc/sudoers.d/sparkops: "
        "'{user} ALL=(ALL) NOPASSWD: ALL') ({guide})",
    ),
    (
        re.compile(r"Incorrect (sudo|become) password|incorrect password attempt", re.I),
        "sudo refused the password: run again with -K and type {user}'s own login password on "
        "{host} ({guide})",
    ),
    (
        re.compile(r"is not in the sudoers file|may not run sudo", re.I),
        "{user} may not use sudo on {host}: add it to the sudo group there "
        "(sudo usermod -aG sudo {user}) or set ansible_user to an account that may ({guide})",
    ),
    (
        re.compile(r"Permission denied \((publickey|gssapi|password|keyboard)", re.I),
        "SSH refused the login: copy your key once with `ssh-copy-id {user}@{address}` (make "
        "one first with `ssh-keygen -t ed25519` if ~/.ssh has none), check ansible_user in "
        "hosts.yml, then run again ({guide})",
    ),
    (
        re.compile(r"Host key verification failed", re.I),
        "the Spark's SSH host key is not known here: run `ssh {user}@{address}` once and accept "
        "it, then run again ({guide})",
    ),
    (
        SSH_UNREACHABLE,
        "cannot reach {address} over SSH on port {port}: check ansible_host (and ansible_port) "
        "in hosts.yml, that the Spark is on and that `{ssh} {user}@{address}` works from here "
        "({guide})",
    ),
)
# Ansible's words for its connection to the host: only then is a refused port SSH's.
VIA_SSH = re.compile(r"via ssh|\bssh: ", re.I)
SSH_PORT = re.compile(r"\bport (\d+)\b")
DEFAULT_SSH_PORT = "22"
# A task that reached the host and asked something there that did not answer.
NOT_ANSWERED = (
    (re.compile(r"Connection refused", re.I), "connection refused"),
    (re.compile(r"No route to host", re.I), "no route to host"),
    (re.compile(r"timed out", re.I), "timed out"),
    (re.compile(r"Name or service not known|Name does not resolve", re.I), "unknown name"),
)
URL = re.compile(r"\bhttps?://[^\s'\"<>)\]]+")
NOT_ANSWERED_FIX = (
    "nothing answered at {url} on {host} ({why}). {reached}: what should listen "
    "on port {port} there is not running (or listens elsewhere). For the serving stack: "
    "`sudo systemctl status sparkops-serving.service` and `sudo journalctl -u "
    "sparkops-serving.service -n 100` on {host}, or ansible/playbooks/logs.yml, say why "
    "({guide})"
)


def fix_for(
    message: str,
    host: str,
    user: str,
    address: str,
    *,
    unreachable: bool = False,
    port: str = "",
    url: str = "",
    connection: str = "",
) -> str | None:
    """The one line for a failure `message` (None when the kit has no fix to name).

    A refused or timed-out connection is SSH's only when Ansible could not reach the host
    (`unreachable`, or its message says "via ssh"); the port is the one SSH names, else
    `port` (ansible_port), else SSH's 22. On a host that was reached, the line names the
    URL that did not answer (`url`, else the first one in the message)."""
    ssh = unreachable or bool(VIA_SSH.search(message))
    for pattern, fix in FIXES:
        if pattern.search(message) and (ssh or pattern is not SSH_UNREACHABLE):
            tried = SSH_PORT.search(message)
            ssh_port = tried.group(1) if tried else (port or DEFAULT_SSH_PORT)
            return f"sparkops: {host}: " + fix.format(
                host=host,
                user=user or "your account",
                address=address or host,
                guide=GUIDE,
                port=ssh_port,
                ssh="ssh" if ssh_port == DEFAULT_SSH_PORT else f"ssh -p {ssh_port}",
            )
    return None if ssh else _not_answered(message, host, address, url, connection)


def _not_answered(message: str, host: str, address: str, url: str, connection: str) -> str | None:
    """The line for a task on a reachable host whose URL did not answer (None: no URL)."""
    why = next((words for pattern, words in NOT_ANSWERED if pattern.search(message)), "")
    found = url or next(iter(URL.findall(message)), "").rstrip(".,:;")
    if not why or not found:
        return None
    parts = urlsplit(found)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    reached = (
        f"The task ran on {host} (ansible_connection: {connection})"
        if connection in ("local", "docker", "community.docker.docker_api")
        else f"SSH to {address or host} worked"
    )
    return f"sparkops: {host}: " + NOT_ANSWERED_FIX.format(
        url=found, host=host, why=why, reached=reached, port=port, guide=SERVING_GUIDE
    )


WORDS = ("msg", "module_stderr", "stderr", "module_stdout")


def _message(result: Any) -> str:
    """Ansible's words for a failed or unreachable result (msg, module_stderr, stderr), with
    those of the results nested in it: a loop's `results`, and the `failed_modules` of fact
    gathering, where sudo's own "a password is required" lands over some connections."""
    if isinstance(result, list):
        return " ".join(_message(item) for item in result)
    if not isinstance(result, dict):
        return ""
    parts = [str(result[key]) for key in WORDS if result.get(key)]
    parts += [_message(result.get("results"))]
    parts += [_message(list((result.get("failed_modules") or {}).values()))]
    return " ".join(part for part in parts if part)


class CallbackModule(CallbackBase):
    """Prints the fix after Ansible's own report of an SSH or sudo failure, once per host."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "sparkops_fixes"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._told: set[tuple[str, str]] = set()

    def _advise(self, result: Any, unreachable: bool = False) -> None:
        host = result._host
        variables = host.get_vars() if hasattr(host, "get_vars") else {}
        user = str(variables.get("ansible_user") or variables.get("ansible_ssh_user") or "")
        address = str(variables.get("ansible_host") or host.get_name())
        port = str(variables.get("ansible_port") or variables.get("ansible_ssh_port") or "")
        answer = result._result if isinstance(result._result, dict) else {}
        line = fix_for(
            _message(result._result),
            host.get_name(),
            user,
            address,
            unreachable=unreachable or bool(answer.get("unreachable")),
            port=port,
            url=str(answer.get("url") or ""),
            connection=str(variables.get("ansible_connection") or ""),
        )
        if line and (host.get_name(), line) not in self._told:
            self._told.add((host.get_name(), line))
            self._display.display(line, color="bright red", stderr=True)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not ignore_errors:
            self._advise(result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._advise(result, unreachable=True)
