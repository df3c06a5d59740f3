"""Every entry playbook checks the inventory first and reads the shared deploy facts from one
role, sparkops_defaults (kubespray's kubespray_defaults is the model).

The serving folder, its unit, the vLLM container and the vLLM URL used to be re-declared by
deploy, status, restart, logs, teardown, batch and preflight; a changed stack folder then
reached some playbooks and not others. Here the literals may appear only where they are
declared: sparkops_defaults and the owning roles' defaults/argument_specs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.plugins.playbook import REPO, run_playbook

PLAYBOOKS = REPO / "ansible" / "playbooks"
ENTRY = sorted(p.name for p in PLAYBOOKS.glob("*.yml") if p.name != "validate_inventory.yml")
# Spelt once, in sparkops_defaults (and the owning role's defaults + argument_specs).
SHARED_LITERALS = [
    "/opt/sparkops/serving",
    "sparkops-serving.service",
    "-vllm-1",
    "sparkops_vllm_url(",
    "/opt/sparkops/venv",
]
DECLARED_IN = {
    "ansible/roles/sparkops_defaults/defaults/main.yml",
    "ansible/roles/sparkops_defaults/meta/argument_specs.yml",
    "ansible/roles/vllm_serving/defaults/main.yml",
    "ansible/roles/vllm_serving/meta/argument_specs.yml",
    "ansible/roles/sparkops_cli/defaults/main.yml",
    "ansible/roles/sparkops_cli/meta/argument_specs.yml",
}


def plays(playbook: str) -> list[dict]:
    return yaml.safe_load((PLAYBOOKS / playbook).read_text())


def test_there_are_entry_playbooks() -> None:
    assert {"deploy.yml", "status.yml", "provision.yml", "preflight.yml"} <= set(ENTRY)


@pytest.mark.parametrize("playbook", ENTRY)
def test_an_entry_playbook_imports_the_inventory_check_first(playbook: str) -> None:
    first = plays(playbook)[0]
    assert first.get("ansible.builtin.import_playbook") == "validate_inventory.yml", playbook


@pytest.mark.parametrize("playbook", ENTRY)
def test_every_play_on_the_sparks_that_reads_shared_facts_lists_the_defaults_role_first(
    playbook: str,
) -> None:
    for play in plays(playbook)[1:]:
        text = yaml.safe_dump(play)
        if "sparkops_defaults_" not in text and not any(
            (r.get("role") if isinstance(r, dict) else r)
            in {"vllm_serving", "litellm_router", "ray_cluster"}
            for r in play.get("roles", [])
        ):
            continue
        roles = play.get("roles") or []
        first = roles[0].get("role") if roles and isinstance(roles[0], dict) else None
        assert first == "sparkops_defaults", f"{playbook}: play '{play['name']}'"


def test_the_shared_facts_are_spelt_only_where_they_are_declared() -> None:
    found = []
    for path in sorted((REPO / "ansible").rglob("*")):
        if path.suffix not in {".yml", ".j2"} or not path.is_file():
            continue
        relative = str(path.relative_to(REPO))
        if relative in DECLARED_IN:
            continue
        text = path.read_text()
        found += [f"{relative}: {literal}" for literal in SHARED_LITERALS if literal in text]
    assert found == []


@pytest.mark.parametrize("playbook", ["deploy.yml", "status.yml"])
def test_a_misspelt_role_variable_stops_the_playbook_before_any_host(
    tmp_path: Path, playbook: str
) -> None:
    """deploy.yml did not import the inventory check: vllm_serving_prot fell back to 8000."""
    host = {
        "ansible_host": "192.0.2.1",  # TEST-NET-1: nothing answers, nothing may be contacted
        "ansible_python_interpreter": sys.executable,
        "vllm_serving_prot": 8001,
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"sparkops_topology": "single"},
                    "children": {"sparks": {"hosts": {"spark-1": host}}},
                }
            }
        )
    )
    run = run_playbook(playbook, inventory, timeout=120)
    assert run.rc != 0
    assert "vllm_serving_prot is not a variable of the role vllm_serving" in run.stdout
    assert "did you mean vllm_serving_port?" in run.stdout
    # No task ran on the host: the check runs once, delegated to the controller (it is
    # attributed to a host of the run so that --limit cannot skip it), and nothing after it.
    assert run.recap["spark-1"].ok == 0 and run.recap["spark-1"].changed == 0
    assert "fatal: [spark-1 -> localhost]" in run.stdout
    assert run.stdout.count("PLAY [") == 1  # only the inventory check's play started
    assert "Traceback" not in run.output
