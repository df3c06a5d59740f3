"""The test hosts' connection (tests/plugins/ansible_connections/sparkops_testhost.py, issue 34
item 15): a lost answer to Ansible's temporary-folder command is retried idempotently; every
other command, and every real failure, reaches Ansible as Docker gave it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.plugins.loader import shell_loader

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "ansible_connections"
spec = importlib.util.spec_from_file_location("sparkops_testhost", PLUGIN / "sparkops_testhost.py")
testhost = importlib.util.module_from_spec(spec)
spec.loader.exec_module(testhost)

SHELL = shell_loader.get("sh")
SHELL.set_options()
MKDTEMP = SHELL.mkdtemp("ansible-tmp-1-2", tmpdir="/root/.ansible/tmp")  # Ansible's own command
ANSWER = b"ansible-tmp-1-2=/root/.ansible/tmp/ansible-tmp-1-2\n"


@pytest.fixture
def connection(monkeypatch):
    """A Connection whose Docker side answers from a script: (rc, stdout) per call."""
    sent: list[str] = []
    answers: list[tuple[int, bytes]] = []

    def exec_command(self, cmd, in_data=None, sudoable=False):
        sent.append(cmd)
        rc, out = answers.pop(0)
        return rc, out, b""

    monkeypatch.setattr(testhost.DockerApiConnection, "exec_command", exec_command)
    monkeypatch.setattr(testhost.time, "sleep", lambda _: None)
    conn = testhost.Connection.__new__(testhost.Connection)
    monkeypatch.setattr(conn, "get_option", lambda name: "sparkops-test-host", raising=False)
    return conn, sent, answers


def test_a_lost_answer_is_retried_with_an_idempotent_mkdir(connection):
    conn, sent, answers = connection
    answers += [(0, b""), (0, ANSWER)]
    assert conn.exec_command(MKDTEMP) == (0, ANSWER, b"")
    assert len(sent) == 2
    assert '&& mkdir "` echo /root/.ansible/tmp/ansible-tmp-1-2' in sent[0]
    assert sent[1] == sent[0].replace('&& mkdir "', '&& mkdir -p "')
    assert sent[1].count("mkdir -p") == 2


def test_real_failures_and_other_commands_are_not_retried(connection):
    conn, sent, answers = connection
    answers += [(1, b"")]  # mkdir failed: Ansible reports it
    assert conn.exec_command(MKDTEMP)[0] == 1 and len(sent) == 1
    answers += [(0, b"")]  # a module's empty answer is its own business
    assert conn.exec_command("/usr/bin/python3 module.py") == (0, b"", b"")
    assert len(sent) == 2
    answers += [(0, b"")] * (1 + testhost.RETRIES)  # stays empty: Ansible fails as before
    assert conn.exec_command(MKDTEMP) == (0, b"", b"")
    assert len(sent) == 3 + testhost.RETRIES


def test_a_command_given_as_bytes_passes_through(connection):
    """docker_api's own put_file sends b'id -u && id -g'."""
    conn, sent, answers = connection
    answers += [(0, b"0\n0\n")]
    assert len(sent) == 0
    assert conn.exec_command(b"id -u && id -g") == (0, b"0\n0\n", b"")
    assert sent == [b"id -u && id -g"]
