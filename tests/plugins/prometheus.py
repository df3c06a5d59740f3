"""A real Prometheus (Debian's `prometheus`, installed by `make watch-tools`) for the tests
that must see the kit's metrics and alert rules as Prometheus itself sees them.

`running_prometheus(folder, targets)` writes a configuration that scrapes each target every
second and loads the kit's rules (`RULES`, the file role prometheus_watch installs), starts
Prometheus on a free loopback port with its storage in `folder`, and stops it at the end
whatever happened. The `Prometheus` it yields asks the HTTP API (`query`, `rules`), and
`poll` waits for what Prometheus says to hold: it scrapes on its own interval, so a test
polls with a generous deadline and fails only there, with what it saw last and the tail of
Prometheus' own log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.plugins.fault_server import free_port

RULES = Path(__file__).resolve().parents[2] / (
    "ansible/roles/prometheus_watch/files/sparkops-alerts.rules.yml"
)
# A bound on a hang, not a timing: Prometheus scrapes every second, the machine may be busy.
DEADLINE_S = 180.0
POLL_S = 0.5


def prometheus_binary() -> str:
    """Debian's `prometheus` on PATH; the test fails naming the fix where it is missing."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: run `make watch-tools` (Debian's prometheus)"
    return binary


def rule_names(path: Path = RULES) -> set[str]:
    """The alert (and recording) rule names a rules file ships."""
    groups = yaml.safe_load(path.read_text())["groups"]
    return {rule.get("alert") or rule["record"] for group in groups for rule in group["rules"]}


def scrape_config(targets: Mapping[str, str]) -> dict[str, Any]:
    """Prometheus' configuration: every target scraped each second at its URL's /metrics
    (`targets`: Prometheus job name -> base URL, http://host:port), the kit's rules
    evaluated each second."""
    jobs = []
    for name, url in targets.items():
        parts = urllib.parse.urlsplit(url)
        jobs.append(
            {
                "job_name": name,
                "metrics_path": parts.path.rstrip("/") + "/metrics",
                "static_configs": [{"targets": [parts.netloc]}],
            }
        )
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": jobs,
    }


@dataclass
class Prometheus:
    """A running Prometheus: its HTTP API on 127.0.0.1:`port`, its log at `log`."""

    port: int
    process: subprocess.Popen
    log: Path

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    def _get(self, route: str) -> Any:
        """The `data` of one API answer; None while Prometheus does not answer."""
        try:
            with urllib.request.urlopen(f"{self.api}/{route}", timeout=5) as answer:
                return json.load(answer)["data"]
        except OSError:
            return None

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (empty while Prometheus does not answer)."""
        data = self._get(f"query?query={urllib.parse.quote(expr)}")
        return data["result"] if data else []

    def values(self, expr: str, label: str = "job") -> dict[str, str]:
        """An instant query's values by one of their labels: {label value: sample value}."""
        return {r["metric"].get(label, ""): r["value"][1] for r in self.query(expr)}

    def rules(self) -> list[dict[str, Any]]:
        """Every rule Prometheus loaded (its /rules endpoint), over all groups."""
        data = self._get("rules") or {"groups": []}
        return [rule for group in data["groups"] for rule in group["rules"]]

    def poll(self, seen: Callable[[], Any], holds: Callable[[Any], bool], what: str) -> Any:
        """Call `seen()` until `holds(seen())`, and return what it saw; at `DEADLINE_S`, fail
        naming `what`, the last thing seen and the end of Prometheus' log."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            last = seen()
            if holds(last):
                return last
            if time.monotonic() > deadline or self.process.poll() is not None:
                log = self.log.read_text(errors="replace")[-2000:]
                raise AssertionError(
                    f"Prometheus did not show {what} within {DEADLINE_S:.0f} s "
                    f"(exit status {self.process.poll()}); last seen: {last!r}\n{log}"
                )
            time.sleep(POLL_S)


@contextmanager
def running_prometheus(folder: Path, targets: Mapping[str, str]) -> Iterator[Prometheus]:
    """Debian's Prometheus scraping `targets` (see `scrape_config`) with the kit's rules, on a
    free loopback port, its storage and log in `folder`; stopped at the end."""
    config = folder / "prometheus.yml"
    config.write_text(json.dumps(scrape_config(targets)))
    port, log = free_port(), folder / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [prometheus_binary(), f"--config.file={config}",
             f"--storage.tsdb.path={folder / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield Prometheus(port, process, log)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
