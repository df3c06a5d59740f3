"""Ansible and `sparkops render` write the same files: the deploy role's `sparkops_render`
filter runs under real ansible-playbook and its output is compared with the CLI's. And
`deploy.yml --check` on this machine's inventory warns about a variable whose role prefix is
misspelt (Ansible would ignore it without a word), naming the variable meant."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from sparkops.local.model import ensure_tiny_model
from sparkops.render import render_inventory
from sparkops.render.templates import CLI_HEADER
from tests.plugins.inventories import make_inventory
from tests.plugins.playbook import run_playbook
from tests.plugins.vllm_server import mounted_venv_vars

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HEADER = "Managed by Ansible (test)"

PLAYBOOK = """
- name: Render through the deploy role's filter
  hosts: sparks
  gather_facts: false
  tasks:
    - name: Render this host's files
      ansible.builtin.set_fact:
        rendered: "{{ hostvars | sparkops_render(groups, inventory_hostname, header) }}"
    - name: Write them where the test can compare
      ansible.builtin.copy:
        content: "{{ item.content }}"
        dest: "{{ out }}/{{ inventory_hostname }}/{{ item.path }}"
        mode: "{{ item.mode }}"
      loop: "{{ rendered.files }}"
      delegate_to: localhost
"""


def _comment(text: str) -> str:
    return f"#\n# {text}\n#"


@pytest.mark.parametrize("topology", ["data-parallel", "pipeline-ray"])  # every template
def test_ansible_filter_writes_what_sparkops_render_writes(tmp_path, topology):
    inventory = make_inventory(tmp_path / "inv", topology)
    cli_out, ansible_out = tmp_path / "cli", tmp_path / "ansible"
    key = "sk-" + "k" * 40
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    sparks = hosts["all"]["children"]["sparks"]
    group = sparks["children"]["spark_pair"] if "children" in sparks else sparks  # a pair
    for host, hvars in group["hosts"].items():
        # The connection comes with -e below: in the inventory, `local` beside each host's
        # address is what the inventory check refuses (every task would run here).
        hvars["ansible_python_interpreter"] = sys.executable
        (ansible_out / host).mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = {
        "ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter"),
        "LITELLM_MASTER_KEY": key,
    }
    result = run_playbook(
        tmp_path / "play.yml",
        inventory / "hosts.yml",
        "-e", "ansible_connection=local",
        "-e", f"out={ansible_out}", "-e", f"header={HEADER!r}",
        "-e", f"litellm_router_master_key={key}",
        env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-3000:]
    os.environ["LITELLM_MASTER_KEY"] = key
    try:
        rendered = render_inventory(inventory, cli_out)
    finally:
        del os.environ["LITELLM_MASTER_KEY"]
    compared = 0
    for host, files in rendered.items():
        for file in files:
            ours = (ansible_out / host / file.path).read_text()
            if file.path.endswith(".json"):  # JSON has no comments: no header, byte for byte
                assert ours == file.content, file.path
            else:  # only the managed header differs: Ansible's ansible_managed vs the CLI's note
                assert _comment(HEADER) in ours and _comment(CLI_HEADER) in file.content
                assert ours.replace(_comment(HEADER), "") == file.content.replace(
                    _comment(CLI_HEADER), ""
                ), file.path
            assert (ansible_out / host / file.path).stat().st_mode & 0o777 == file.mode
            compared += 1
    assert compared >= 3


def _misspelt(wrong: str, role: str, meant: str) -> str:
    return (
        f"WARNING: {wrong} looks like a variable of the role {role} with its prefix misspelt"
        f" (did you mean {meant}?); Ansible ignores it, so the role keeps its default."
    )


@pytest.mark.timeout(600)
def test_deploy_check_warns_about_a_misspelt_role_prefix_once_before_any_host_task(
    tmp_path, vllm_cpu_runtime_image
):
    """`vlm_serving_port` in group_vars and `host_tunning_job_users` given with -e belong to no
    role: the inventory check lets them through, so it names the variables meant, and the check
    run goes on to the end (a warning, not a refusal) and writes nothing."""
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "local", inventory)
    # After serving.yml in group_vars/all/, so these win: this test's folders, and the typo.
    test_vars = {
        "vllm_serving_image": vllm_cpu_runtime_image,
        "vllm_serving_model_dir": str(ensure_tiny_model()),
        "vllm_serving_stack_dir": str(tmp_path / "stack"),
        "vllm_serving_stack_record": str(tmp_path / "etc" / "stack-record.json"),
        "vllm_serving_hf_cache": str(tmp_path / "hf-cache"),
        **mounted_venv_vars(),
        "vlm_serving_port": 8001,
    }
    (inventory / "group_vars" / "all" / "test.yml").write_text(yaml.safe_dump(test_vars))
    run = run_playbook(
        "deploy.yml", inventory, "-e", "ansible_become=false",
        "-e", '{"host_tunning_job_users": ["researcher"]}',
        check=True, inherit_env=False, cwd=REPO / "ansible", timeout=600,
    )  # fmt: skip
    assert run.rc == 0, run.stdout[-4000:]
    warnings = [
        _misspelt("host_tunning_job_users", "host_tuning", "host_tuning_job_users"),
        _misspelt("vlm_serving_port", "vllm_serving", "vllm_serving_port"),
    ]
    for warning in warnings:
        assert run.text.count(warning) == 1, run.stdout[-4000:]
    assert run.text.count("WARNING: ") == len(warnings)
    first_host_play = run.text.index("PLAY [Check the QSFP link of a pipeline-parallel pair]")
    assert max(run.text.index(w) for w in warnings) < first_host_play
    assert "Traceback" not in run.output
    assert not (tmp_path / "stack").exists()
