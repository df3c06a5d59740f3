"""One inventory check for `sparkops render` and the playbooks (issue 31 item 5, issue 34 item 6).

`sparkops render` used to pass inventories validate_inventory.yml refuses (QSFP addresses in
two subnets, a misspelt prefix rendered with the default port, an unknown variable without the
name meant), and `--limit spark-1` skipped the whole check (its play ran on localhost only).
Both now call sparkops.render.inventory_checks: these run the CLI and the playbook as a user
does and compare what each says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sparkops.render.inventory_checks import qsfp_subnet_problem
from sparkops.render.role_vars import load_role_specs, misspelt_prefixes, play_settings
from tests.plugins.cli import sparkops
from tests.plugins.playbook import run_playbook

REPO = Path(__file__).resolve().parents[2]
SUBNETS = (
    "Hosts spark-a and spark-b have QSFP addresses 192.168.100.10 and 192.168.101.11 (subnet "
    "192.168.100.0/24 and 192.168.101.0/24): they must be two different addresses in one subnet "
    "with the same qsfp_network_prefix (e.g. 192.168.100.10 and 192.168.100.11 with prefix 24). "
    "Fix qsfp_network_address in hosts.yml."
)


def _copy(example: str, tmp_path: Path) -> Path:
    inventory = tmp_path / example
    shutil.copytree(REPO / "inventory" / example, inventory)
    return inventory


def _edit(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


def _two_subnets(tmp_path: Path) -> Path:
    inventory = _copy("pair-dp", tmp_path)

    def move_b(data: dict) -> None:
        hosts = data["all"]["children"]["sparks"]["children"]["spark_pair"]["hosts"]
        hosts["spark-b"]["qsfp_network_address"] = "192.168.101.11"

    _edit(inventory / "hosts.yml", move_b)
    return inventory


def _render(inventory: Path, cwd: Path):
    return sparkops("render", "--inventory", str(inventory), "--out", "out", limit=120, cwd=cwd)


def test_render_refuses_qsfp_addresses_in_two_subnets_in_the_playbook_s_words(
    tmp_path: Path,
) -> None:
    inventory = _two_subnets(tmp_path)
    rendered = _render(inventory, tmp_path)
    assert rendered.returncode == 2, rendered.stderr
    assert rendered.stderr.strip() == f"sparkops: error: {SUBNETS}"
    assert not (tmp_path / "out").exists()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0
    assert SUBNETS in played.text


def test_limit_to_one_host_still_checks_the_whole_inventory(tmp_path: Path) -> None:
    """`--limit spark-a` used to print "skipping: no hosts matched" and go on (rc 0)."""
    inventory = _two_subnets(tmp_path)
    played = run_playbook("validate_inventory.yml", inventory, "--limit", "spark-a")
    assert played.rc != 0, played.output
    assert SUBNETS in played.text
    # A good inventory passes under a limit too, without connecting (192.0.2.x is unroutable).
    good = run_playbook("validate_inventory.yml", REPO / "inventory" / "pair-dp", "-l", "spark-b")
    assert good.rc == 0, good.output
    assert "OK: the inventory passed every check (2 Spark(s): spark-a, spark-b" in good.text


def test_a_misspelt_prefix_is_warned_by_render_and_playbook_alike(tmp_path: Path) -> None:
    """vlm_serving_port: 8001 rendered port 8000 without a word."""
    inventory = _copy("single", tmp_path)
    _edit(
        inventory / "group_vars" / "all" / "serving.yml",
        lambda data: data.update(vlm_serving_port=8001),
    )
    warning = (
        "vlm_serving_port looks like a variable of the role vllm_serving with its prefix "
        "misspelt (did you mean vllm_serving_port?); Ansible ignores it, so the role keeps its "
        "default. Fix or remove it (the declared names are in "
        "ansible/roles/vllm_serving/meta/argument_specs.yml)."
    )
    rendered = _render(inventory, tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert f"sparkops: warning: {warning}" in rendered.stderr.splitlines()
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc == 0, played.output
    assert f"WARNING: {warning}" in played.text


def test_an_unknown_role_variable_names_the_one_meant_in_render_too(tmp_path: Path) -> None:
    """render said "unknown variable (check its spelling)" where the playbook names it."""
    inventory = _copy("single", tmp_path)
    _edit(
        inventory / "group_vars" / "all" / "serving.yml",
        lambda data: data.update(vllm_serving_prot=8001),
    )
    rendered = _render(inventory, tmp_path)
    assert rendered.returncode == 2
    (line,) = rendered.stderr.strip().splitlines()
    assert line.startswith(
        "sparkops: error: Host spark-1: vllm_serving_prot is not a variable of the role "
        "vllm_serving (did you mean vllm_serving_port?)"
    )
    played = run_playbook("validate_inventory.yml", inventory)
    assert played.rc != 0
    assert line.removeprefix("sparkops: error: ") in played.text


def test_the_readme_s_preflight_settings_are_not_called_a_misspelt_role_prefix() -> None:
    specs = load_role_specs(REPO / "ansible" / "roles")
    plays = play_settings(REPO / "ansible" / "playbooks")
    readme = [
        "sparkops_preflight_concurrency",
        "sparkops_preflight_summary_dir",
        "sparkops_batch_name",
        "sparkops_status_dir",
    ]
    assert misspelt_prefixes(readme, specs, plays) == []
    (warning,) = misspelt_prefixes(["sparkops_prefligth_concurrency"], specs, plays)
    assert warning == (
        "sparkops_prefligth_concurrency looks like a setting of preflight.yml with its prefix "
        "misspelt (did you mean sparkops_preflight_concurrency?); Ansible ignores it, so "
        "preflight.yml keeps its default. Fix or remove it (the declared names are in "
        "ansible/playbooks/vars/preflight.yml)."
    )


@pytest.mark.parametrize(
    ("a", "b", "fine"),
    [
        (("10.0.0.1", 24), ("10.0.0.2", 24), True),
        (("10.0.0.1", 24), ("10.0.1.2", 24), False),
        (("10.0.0.1", 16), ("10.0.1.2", 16), True),
        (("10.0.0.1", 24), ("10.0.0.1", 24), False),  # one address twice
        (("10.0.0.1", 24), ("10.0.0.2", 25), False),  # prefixes differ
        (("10.0.0.1", "24"), ("10.0.0.2", "24"), True),  # -e gives strings
    ],
)
def test_the_qsfp_subnet_rule(a: tuple, b: tuple, fine: bool) -> None:
    hostvars = {
        "x": {"qsfp_network_address": a[0], "qsfp_network_prefix": a[1]},
        "y": {"qsfp_network_address": b[0], "qsfp_network_prefix": b[1]},
    }
    assert (qsfp_subnet_problem(["x", "y"], hostvars) is None) is fine


def test_render_out_naming_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    """It gave a traceback and exit 1, which the README calls "stopped, re-run to resume"."""
    (tmp_path / "out").write_text("notes\n")
    rendered = _render(REPO / "inventory" / "single", tmp_path)
    assert rendered.returncode == 2
    assert rendered.stderr.strip() == (
        "sparkops: error: --out out: out is a file, not a folder; name a folder for the "
        "rendered files (it is created when missing)"
    )
    assert (tmp_path / "out").read_text() == "notes\n"
