"""`sparkops render` reads an inventory through ansible-core, so it resolves what Ansible does.

The cases below are where the former hand-written reader and Ansible disagreed: inline group
vars in hosts.yml rank below every group_vars file (Ansible's order, not "child beats
parent"), group_vars files in JSON or without extension, ansible_group_priority, Ansible's own
filters and lookups. Each expected value is checked against `ansible` itself on the same
inventory, so the test proves agreement rather than restating it. Errors a user can cause stay
one line from the CLI, exit 2, no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkops.errors import UserError
from sparkops.render.inventory import read_inventory
from tests.plugins.playbook import playbook_env

VENV_BIN = Path(sys.executable).parent
CHECKED = [
    "vllm_serving_port",
    "vllm_serving_project",
    "vllm_serving_bind_address",
    "vllm_serving_extra_env",
    "litellm_router_port",
    "ray_cluster_interface",
]


def write_inventory(root: Path) -> Path:
    """Two Sparks in a nested group, with every kind of variable source Ansible merges."""
    root.mkdir(parents=True, exist_ok=True)
    hosts = {
        "all": {
            "vars": {"litellm_router_port": 4100},
            "children": {
                "sparks": {
                    # inline group vars rank below group_vars/all in Ansible
                    "vars": {"vllm_serving_port": 8300, "ansible_group_priority": 1},
                    "children": {
                        "pair": {
                            "vars": {"ray_cluster_interface": "from-pair"},
                            "hosts": {
                                "spark-1": {"ansible_host": "10.0.0.11"},
                                "spark-2": {"ansible_host": "10.0.0.12"},
                            },
                        },
                        # same depth as `pair`: the higher priority wins
                        "priority": {
                            "vars": {"ansible_group_priority": 10},
                            "hosts": {"spark-2": {}},
                        },
                    },
                }
            },
        }
    }
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    all_vars = root / "group_vars" / "all"
    all_vars.mkdir(parents=True)
    (all_vars / "serving.yml").write_text(
        "vllm_serving_port: 8000\n"
        "vllm_serving_project: \"{{ inventory_hostname | regex_replace('-', '_') }}\"\n"
        'vllm_serving_bind_address: "{{ qsfp_address | default(ansible_host) }}"\n'
        "vllm_serving_extra_env:\n"
        "  GROUPS: \"{{ group_names | join(',') }}\"\n"
        "  FIRST: \"{{ groups['pair'] | first }}\"\n"
        "  HEAD: \"{{ hostvars[groups['pair'][0]].ansible_host }}\"\n"
    )
    (root / "group_vars" / "priority").write_text(
        json.dumps({"ray_cluster_interface": "from-priority"})  # a file without extension
    )
    (root / "host_vars").mkdir()
    (root / "host_vars" / "spark-1.json").write_text(json.dumps({"litellm_router_port": 4200}))
    return root


def ansible_says(inventory: Path) -> dict[str, dict]:
    """The same variables as ansible-core's own command line resolves them (no connection:
    the debug action runs on the controller)."""
    msg = "{{ {" + ", ".join(f"'{k}': {k}" for k in CHECKED) + "} }}"
    result = subprocess.run(
        [str(VENV_BIN / "ansible"), "all", "-i", str(inventory), "-o", "-m",
         "ansible.builtin.debug", "-a", f"msg={msg}"],
        capture_output=True, text=True, timeout=120, env=playbook_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    said = {}
    for line in result.stdout.splitlines():
        host, _, payload = line.partition(" | SUCCESS => ")
        said[host] = json.loads(payload)["msg"]
    return said


def test_variables_resolve_as_ansible_resolves_them(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path / "inv")
    parsed = read_inventory(inventory)
    ours = {h: {k: parsed.hostvars[h][k] for k in CHECKED} for h in parsed.hosts}
    assert ours == ansible_says(inventory)
    # and what Ansible's rules give, spelt out: group_vars/all beats inline group vars
    assert ours["spark-1"]["vllm_serving_port"] == 8000
    assert ours["spark-1"]["litellm_router_port"] == 4200  # host_vars/*.json
    assert ours["spark-2"]["litellm_router_port"] == 4100
    assert ours["spark-1"]["ray_cluster_interface"] == "from-pair"
    assert ours["spark-2"]["ray_cluster_interface"] == "from-priority"  # priority 10
    assert ours["spark-2"]["vllm_serving_project"] == "spark_2"  # Ansible's own filter
    assert ours["spark-2"]["vllm_serving_extra_env"] == {
        "GROUPS": "pair,priority,sparks",
        "FIRST": "spark-1",
        "HEAD": "10.0.0.11",
    }
    assert parsed.hosts == ["spark-1", "spark-2"]
    assert parsed.groups["sparks"] == ["spark-1", "spark-2"]
    assert "groups" not in parsed.hostvars["spark-1"]  # Ansible's magic is not a setting
    assert "hostvars" not in parsed.hostvars["spark-1"]


def test_lookups_and_defaults_follow_ansible(tmp_path: Path, monkeypatch) -> None:
    inventory = write_inventory(tmp_path / "inv")
    (inventory / "group_vars" / "all" / "secrets.yml").write_text(
        "vllm_serving_api_key: \"{{ lookup('ansible.builtin.env', 'H6_KEY') }}\"\n"
        "vllm_serving_hf_token: \"{{ lookup('ansible.builtin.file', 'token.txt') }}\"\n"
    )
    (inventory / "group_vars" / "all" / "token.txt").write_text("hf_from_file\n")
    monkeypatch.setenv("H6_KEY", "k-123")
    monkeypatch.chdir(inventory / "group_vars" / "all")  # lookup('file') is relative to cwd
    hostvars = read_inventory(inventory).hostvars["spark-1"]
    assert hostvars["vllm_serving_api_key"] == "k-123"
    assert hostvars["vllm_serving_hf_token"] == "hf_from_file"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "sparkops"), *args],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("vault", "is vault-encrypted: `sparkops render` has no vault password"),
        (
            "bad yaml",
            "broken.yml is not valid YAML (line 3: expected ',' or ']', but got "
            "'<stream end>'); fix the file",
        ),
        ("undefined", "inventory host spark-1: vllm_serving_hf_cache: "),
        ("no hosts file", "no hosts.yml in"),
        (
            "hosts as a list",
            'Invalid "hosts" entry for "all" group, requires a dictionary, found list',
        ),
    ],
)
def test_inventory_errors_are_one_line_and_exit_2(tmp_path: Path, case: str, expected: str) -> None:
    inventory = write_inventory(tmp_path / "inv")
    broken = inventory / "group_vars" / "all" / "broken.yml"
    if case == "vault":
        broken.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    elif case == "bad yaml":
        broken.write_text("vllm_serving_port: 1\nvllm_serving_image: [unclosed\n")
    elif case == "undefined":
        broken.write_text('vllm_serving_hf_cache: "{{ qsfp_adress }}"\n')
    elif case == "hosts as a list":
        (inventory / "hosts.yml").write_text("all:\n  hosts: [spark-1, spark-2]\n")
    else:
        (inventory / "hosts.yml").unlink()
    with pytest.raises(UserError):
        read_inventory(inventory)
    result = _cli("render", "--inventory", str(inventory), "--out", "out", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkops: error: "), result.stderr
    assert expected in lines[0]
    if case == "undefined":
        assert "qsfp_adress" in lines[0] and "Define what it refers to" in lines[0]
    assert not (tmp_path / "out").exists()


def test_an_unresolvable_variable_the_renderer_does_not_read_is_kept(tmp_path: Path) -> None:
    """ansible_python_interpreter: "{{ ansible_playbook_python }}" (inventory/local) is for
    Ansible; the render must not stop on names only a play defines."""
    inventory = write_inventory(tmp_path / "inv")
    (inventory / "group_vars" / "all" / "play.yml").write_text(
        'host_tuning_note: "{{ some_play_fact }}"\n'
    )
    hostvars = read_inventory(inventory).hostvars["spark-1"]
    assert hostvars["host_tuning_note"] == "{{ some_play_fact }}"


def test_the_cli_pays_for_ansible_only_when_it_reads_an_inventory() -> None:
    code = "import sys, sparkops.cli; print(any(m.startswith('ansible') for m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_every_example_inventory_reads() -> None:
    repo = Path(__file__).resolve().parents[2]
    for example in sorted(p for p in (repo / "inventory").iterdir() if p.is_dir()):
        assert read_inventory(example).hosts, example
