"""The kit's alert rules (issue 41 item 2), tested with the real `promtool test rules`: every
alert fires on the series that should page and stays quiet for a healthy neighbour
(tests/unit/data/prometheus/sparkops-alerts.test.yml), and a rule that is wrong fails them.

promtool is Debian's `prometheus` package's (`make watch-tools` installs it); without it this
fails with the fix, never skips.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "ansible/roles/prometheus_watch/files/sparkops-alerts.rules.yml"
TESTS = REPO / "tests/unit/data/prometheus/sparkops-alerts.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: run `make watch-tools` (Debian's prometheus)"
    return found


def run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, check=False
    )


def alerts(rules: dict) -> set[str]:
    return {r["alert"] for group in rules["groups"] for r in group["rules"] if "alert" in r}


def test_the_rules_are_valid_and_every_alert_passes_its_unit_tests(promtool):
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", str(TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_shipped_alert_has_a_case_where_it_fires():
    shipped = alerts(yaml.safe_load(RULES.read_text()))
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"] for c in t["alert_rule_test"]]
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == shipped
    assert len(shipped) == 15


@pytest.mark.parametrize(
    ("rule", "before", "after"),
    [
        ("the stall bound", "> 900", "> 90000"),
        ("the hit-rate gap", ") > 0.05", ") > 0.5"),
        ("the ETA slip", "+ 3600 > 1800", "+ 3600 > 18000"),
    ],
)
def test_a_wrong_rule_fails_the_unit_tests(promtool, tmp_path, rule, before, after):
    text = RULES.read_text()
    assert before in text, rule
    broken = tmp_path / "rules.yml"
    broken.write_text(text.replace(before, after))
    tests = yaml.safe_load(TESTS.read_text())
    tests["rule_files"] = [str(broken)]
    case = tmp_path / "tests.yml"
    case.write_text(yaml.safe_dump(tests))
    result = run(promtool, "test", "rules", str(case))
    assert result.returncode != 0, rule
    assert "FAILED" in result.stdout + result.stderr
