"""The test hosts' connection (tests/plugins/ansible_connections/sparkops_testhost.py, issue 34
item 15): a lost or failed answer to Ansible's temporary-folder command, or to the plugin's
user look-up, is retried idempotently; a failure that stays reaches Ansible as Docker gave it,
after the retries; every other command goes through untouched."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure
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
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        rc, out = answer
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


def test_a_failed_or_lost_answer_is_retried_and_one_that_stays_reaches_ansible(connection):
    conn, sent, answers = connection
    # a failing exit status or a failed Docker API call on a slow moment: retried
    answers += [(126, b""), AnsibleConnectionFailure("exec timed out"), (0, ANSWER)]
    assert conn.exec_command(MKDTEMP) == (0, ANSWER, b"")
    assert len(sent) == 3
    # a failure that stays (a full disk): Ansible gets Docker's answer after the retries
    answers += [(1, b"")] * (1 + testhost.RETRIES)
    assert conn.exec_command(MKDTEMP) == (1, b"", b"")
    assert len(sent) == 3 + 1 + testhost.RETRIES
    answers += [AnsibleConnectionFailure("no such container")] * (1 + testhost.RETRIES)
    with pytest.raises(AnsibleConnectionFailure, match="no such container"):
        conn.exec_command(MKDTEMP)


def test_other_commands_are_not_retried(connection):
    conn, sent, answers = connection
    answers += [(0, b"")]  # a module's empty answer is its own business
    assert conn.exec_command("/usr/bin/python3 module.py") == (0, b"", b"")
    answers += [(1, b"")]
    assert conn.exec_command("/usr/bin/python3 module.py") == (1, b"", b"")
    answers += [AnsibleConnectionFailure("gone")]
    with pytest.raises(AnsibleConnectionFailure):
        conn.exec_command("/usr/bin/python3 module.py")
    assert len(sent) == 3


def test_the_user_look_up_before_a_file_copy_is_retried_while_its_answer_is_lost(connection):
    """docker_api's own put_file sends b'id -u && id -g' and fails the host "unreachable" on
    an empty answer (seen in the soak's install under a full make test)."""
    conn, sent, answers = connection
    answers += [(0, b"0\n0\n")]
    assert conn.exec_command(b"id -u && id -g") == (0, b"0\n0\n", b"")
    assert sent == [b"id -u && id -g"]
    answers += [(0, b""), (0, b"0\n"), (0, b"1000\n1000\n")]
    assert conn.exec_command(b"id -u && id -g") == (0, b"1000\n1000\n", b"")
    assert sent[1:] == [b"id -u && id -g"] * 3
    # an answer that stays lost reaches docker_api, which says so as before
    answers += [(0, b"")] * (1 + testhost.RETRIES)
    assert conn.exec_command(b"id -u && id -g") == (0, b"", b"")
    assert len(sent) == 4 + 1 + testhost.RETRIES
