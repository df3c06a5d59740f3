"""The kit's output names the fix when a play fails for sudo or SSH (issue 31, item 1).

Ansible's own words ("Missing sudo password", "UNREACHABLE! ... Permission denied
(publickey,password)") name no fix; ansible/plugins/callback/sparkops_fixes.py adds one line
that does. These feed the callback the results Ansible hands it, in the shapes ansible-core
2.19 gives them (tests/infra/test_sudo_fix.py runs the sudo case on a real host).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.inventory.host import Host

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "ansible/plugins/callback/sparkops_fixes.py"
_spec = importlib.util.spec_from_file_location("sparkops_fixes", PLUGIN)
assert _spec and _spec.loader
fixes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixes)


def _said(result: dict, *, unreachable: bool = False) -> list[str]:
    """What the callback prints for one result on spark-1 (user researcher, 192.0.2.10)."""
    host = Host("spark-1")
    host.set_variable("ansible_user", "researcher")
    host.set_variable("ansible_host", "192.0.2.10")
    callback = fixes.CallbackModule()
    lines: list[str] = []
    callback._display = SimpleNamespace(display=lambda text, **_: lines.append(text))
    task_result = SimpleNamespace(_host=host, _result=result)
    for _ in range(2):  # a second task failing the same way is not told twice
        if unreachable:
            callback.v2_runner_on_unreachable(task_result)
        else:
            callback.v2_runner_on_failed(task_result)
    return lines


def test_a_missing_sudo_password_names_k_and_a_sudoers_rule() -> None:
    (line,) = _said({"msg": "Missing sudo password", "_ansible_no_log": False})
    assert line.startswith("sparkops: spark-1: sudo asks for a password: run again with -K")
    assert "'researcher ALL=(ALL) NOPASSWD: ALL'" in line
    assert line.endswith("(docs/provision.md, 'SSH and sudo')")


def test_sudo_s_own_words_nested_in_fact_gathering_are_recognised() -> None:
    """The shape ansible-core 2.19 gave over the Docker connection (tests/infra/test_sudo_fix)."""
    result = {
        "ansible_facts": {},
        "changed": False,
        "failed_modules": {
            "ansible.legacy.setup": {
                "failed": True,
                "module_stderr": "sudo: a password is required\n",
                "module_stdout": "",
                "msg": "Module result deserialization failed: No start of json char found",
                "rc": 1,
            }
        },
        "msg": "The following modules failed to execute: ansible.legacy.setup.",
    }
    (line,) = _said(result)
    assert line.startswith("sparkops: spark-1: sudo asks for a password: run again with -K")


def test_a_refused_ssh_key_names_ssh_copy_id_with_the_user_and_address() -> None:
    result = {
        "msg": "Failed to connect to the host via ssh: researcher@192.0.2.10: Permission denied "
        "(publickey,password).",
        "unreachable": True,
        "changed": False,
    }
    (line,) = _said(result, unreachable=True)
    assert "`ssh-copy-id researcher@192.0.2.10`" in line


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ("Incorrect sudo password", "sudo refused the password"),
        ("researcher is not in the sudoers file.  This incident will be reported.", "sudo group"),
        ("Failed to connect to the host via ssh: Host key verification failed.", "accept"),
        (
            "Failed to connect to the host via ssh: ssh: connect to host 192.0.2.10 port 22: "
            "Connection timed out",
            "check ansible_host",
        ),
    ],
)
def test_other_ssh_and_sudo_failures_name_their_fix(message: str, words: str) -> None:
    (line,) = _said({"msg": message}, unreachable="ssh" in message)
    assert words in line


def test_other_failures_and_ignored_errors_add_nothing() -> None:
    assert _said({"msg": "The job user 'x' does not exist on spark-1"}) == []
    host = Host("spark-1")
    callback = fixes.CallbackModule()
    lines: list[str] = []
    callback._display = SimpleNamespace(display=lambda text, **_: lines.append(text))
    callback.v2_runner_on_failed(
        SimpleNamespace(_host=host, _result={"msg": "Missing sudo password"}), ignore_errors=True
    )
    assert lines == []


def test_every_kit_playbook_finds_the_callback_beside_it() -> None:
    """Ansible loads <playbook dir>/callback_plugins, with or without the kit's ansible.cfg."""
    link = REPO / "ansible/playbooks/callback_plugins"
    assert link.is_symlink() and (link / "sparkops_fixes.py").is_file()
    assert fixes.CallbackModule.CALLBACK_NEEDS_ENABLED is False
