"""Ansible callback `sparkops_fixes`: one line with the fix when a play fails for SSH or sudo.

A new Spark stops a first run in one of two ways Ansible words for its own experts: a DGX OS
account needs a password for sudo (every play runs with `become: true`), and Ansible says
"Missing sudo password"; or the controller's SSH key is not on the Spark, and the host is
"UNREACHABLE! ... Permission denied (publickey,password)". Neither message names the fix.
This callback recognises them (and a wrong sudo password, an unknown host key, a refused or
timed-out connection) in the results Ansible hands every callback, and prints one line after
Ansible's own, naming the host and the fix:

    sparkops: spark-1: sudo asks for a password: run again with -K (--ask-become-pass) ...

It changes nothing else: no option, no other output. It needs no enabling
(CALLBACK_NEEDS_ENABLED is false): Ansible loads it from ansible/playbooks/callback_plugins,
a link to this folder, for every kit playbook, with or without the kit's ansible.cfg.
The guide is docs/provision.md, "SSH and sudo".
"""

from __future__ import annotations

import re
from typing import Any

from ansible.plugins.callback import CallbackBase

GUIDE = "docs/provision.md, 'SSH and sudo'"
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
        re.compile(
            r"Connection refused|Connection timed out|No route to host|"
            r"Could not resolve hostname|Name or service not known",
            re.I,
        ),
        "cannot reach {address} over SSH: check ansible_host in hosts.yml, that the Spark is on "
        "and that `ssh {user}@{address}` works from here ({guide})",
    ),
)


def fix_for(message: str, host: str, user: str, address: str) -> str | None:
    """The one line for a failure `message` (None when it is not an SSH or sudo failure)."""
    for pattern, fix in FIXES:
        if pattern.search(message):
            return f"sparkops: {host}: " + fix.format(
                host=host, user=user or "your account", address=address or host, guide=GUIDE
            )
    return None


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

    def _advise(self, result: Any) -> None:
        host = result._host
        variables = host.get_vars() if hasattr(host, "get_vars") else {}
        user = str(variables.get("ansible_user") or variables.get("ansible_ssh_user") or "")
        address = str(variables.get("ansible_host") or host.get_name())
        line = fix_for(_message(result._result), host.get_name(), user, address)
        if line and (host.get_name(), line) not in self._told:
            self._told.add((host.get_name(), line))
            self._display.display(line, color="bright red", stderr=True)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if not ignore_errors:
            self._advise(result)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._advise(result)
