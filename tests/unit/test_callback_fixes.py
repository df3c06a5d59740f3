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


# Results captured from ansible-core 2.19.14 (ANSIBLE_STDOUT_CALLBACK=ansible.posix.json):
# restart.yml's "Wait until vLLM answers /health" (ansible.builtin.uri) on a host where SSH
# worked and nothing listened on vLLM's port, and an SSH connection refused on port 2222.
URI_REFUSED = {
    "_ansible_no_log": False,
    "action": "ansible.builtin.uri",
    "attempts": 1,
    "changed": False,
    "elapsed": 0,
    "exception": "(traceback unavailable)",
    "failed": True,
    "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] "
    "Connection refused>",
    "redirected": False,
    "status": -1,
    "url": "http://127.0.0.1:8000/health",
}
SSH_REFUSED_2222 = {
    "_ansible_no_log": False,
    "action": "ansible.builtin.ping",
    "changed": False,
    "exception": "(traceback unavailable)",
    "msg": "Task failed: Failed to connect to the host via ssh: ssh: connect to host 192.0.2.10 "
    "port 2222: Connection refused",
    "unreachable": True,
}
SSH_UNKNOWN_NAME = {
    "_ansible_no_log": False,
    "action": "ansible.builtin.ping",
    "changed": False,
    "exception": "(traceback unavailable)",
    "msg": "Task failed: Failed to connect to the host via ssh: ssh: Could not resolve hostname "
    "spark-nowhere.invalid: Name or service not known",
    "unreachable": True,
}


def test_vllm_s_port_refusing_names_the_url_not_ssh() -> None:
    """Issue 43 item 6: SSH worked and vLLM's port refused; the line said 'cannot reach
    192.0.2.10 over SSH'."""
    (line,) = _said(URI_REFUSED)
    assert "over SSH" not in line and "ssh-copy-id" not in line
    assert line.startswith(
        "sparkops: spark-1: nothing answered at http://127.0.0.1:8000/health on spark-1 "
        "(connection refused). SSH to 192.0.2.10 worked: what should listen on port 8000 there "
        "is not running (or listens elsewhere)."
    ), line
    assert "`sudo journalctl -u sparkops-serving.service -n 100` on spark-1" in line
    assert line.endswith("(docs/deploy.md, 'When the deploy stops')")


def test_the_readiness_wait_s_own_words_get_no_ssh_line() -> None:
    """sparkops_vllm_ready's failure (captured with nothing on the port and no container)
    names the URL itself; the callback adds no line blaming SSH."""
    result = {
        "action": "sparkops_vllm_ready",
        "answered": False,
        "changed": False,
        "container_state": "absent",
        "failed": True,
        "health": -1,
        "msg": "vLLM at http://127.0.0.1:8000: not ready after 5 s (http://127.0.0.1:8000/health: "
        "nothing answered /health). Log tail of sparkops-vllm-1:\nError response from daemon: "
        "No such container: sparkops-vllm-1",
        "problem": "not ready after 5 s (http://127.0.0.1:8000/health: nothing answered /health)",
        "waited": 4.6,
    }
    assert _said(result) == []


def test_the_ssh_line_names_the_port_ssh_tried() -> None:
    (line,) = _said(SSH_REFUSED_2222, unreachable=True)
    assert line.startswith("sparkops: spark-1: cannot reach 192.0.2.10 over SSH on port 2222:")
    assert "`ssh -p 2222 researcher@192.0.2.10` works from here" in line
    assert "nothing answered" not in line


def test_without_a_port_in_ssh_s_words_the_line_names_ansible_port_or_22() -> None:
    (line,) = _said(SSH_UNKNOWN_NAME, unreachable=True)
    assert "cannot reach 192.0.2.10 over SSH on port 22:" in line
    assert "`ssh researcher@192.0.2.10` works" in line
    assert fixes.fix_for(
        SSH_UNKNOWN_NAME["msg"], "spark-1", "me", "spark.lan", unreachable=True, port="2200"
    ) == (
        "sparkops: spark-1: cannot reach spark.lan over SSH on port 2200: check ansible_host "
        "(and ansible_port) in hosts.yml, that the Spark is on and that `ssh -p 2200 "
        "me@spark.lan` works from here (docs/provision.md, 'SSH and sudo')"
    )


def test_a_refusal_without_a_url_on_a_reached_host_adds_nothing() -> None:
    """No URL to name: no line (the old one blamed SSH)."""
    assert (
        _said({"failed": True, "msg": "dial tcp 127.0.0.1:6379: connect: connection refused"}) == []
    )
