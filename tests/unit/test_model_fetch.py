"""The host-side model fetcher (ansible/roles/vllm_serving/files/model-fetch.py): the hub probe
that fails in seconds where no hub answers, and the progress round the deploy loops over. Its
whole path runs in tests/infra/test_deploy_converge.py (a deploy with no hub reachable)."""

from __future__ import annotations

import importlib.util
import json
import socket
from pathlib import Path

FILE = Path(__file__).resolve().parents[2] / "ansible/roles/vllm_serving/files/model-fetch.py"
spec = importlib.util.spec_from_file_location("model_fetch", FILE)
fetcher = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fetcher)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_hub_that_refuses_is_named_and_a_proxy_is_probed_instead(monkeypatch):
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    port = closed_port()
    why = fetcher.unreachable(f"http://127.0.0.1:{port}")
    assert why.startswith(f"cannot reach the hub at 127.0.0.1:{port} within 20 s (")
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:s3cret@127.0.0.1:{port}")
    why = fetcher.unreachable("https://hub.invalid")
    assert why.startswith(f"cannot reach the HTTPS proxy 127.0.0.1:{port} ")
    assert "s3cret" not in why and "user" not in why
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.delenv("HTTPS_PROXY")
        assert fetcher.unreachable(f"http://127.0.0.1:{server.getsockname()[1]}") == ""


class FakeTime:
    """The fetcher's clock: sleeping moves it on at once, so a round's length is exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_progress_round_waits_for_the_job_and_says_when_it_ended(tmp_path, capsys, monkeypatch):
    clock = FakeTime()
    monkeypatch.setattr(fetcher, "time", clock)
    cache = tmp_path / "hf"
    blobs = cache / "hub" / "models--org--m" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "a.incomplete").write_bytes(b"x" * 250_000)
    (cache / "sparkops-models").mkdir()
    (cache / "sparkops-models" / "org--m.total").write_text("1000000")
    job = tmp_path / "job"
    job.write_text(json.dumps({"started": 1, "finished": 0}))
    assert fetcher.wait("org/m", cache, job, 1.5) == 0
    assert clock.now >= 1.5  # the job ran on: the round waited it out
    assert capsys.readouterr().out == "org/m: 0.00 GB of 0.00 GB (25%)\n"
    job.write_text(json.dumps({"rc": 4, "stdout": "org/m: cannot reach the hub"}))
    started = clock.now
    fetcher.wait("org/m", cache, job, 30)
    assert clock.now == started  # the job has ended: no wait at all, not the 30 s round
    assert capsys.readouterr().out.endswith(", the download ended\n")
    fetcher.wait("other/model", cache, tmp_path / "absent", 0)  # nothing yet: no total, no job
    assert capsys.readouterr().out == "other/model: 0.00 GB\n"
