"""Ansible and `sparkops render` write the same files: the deploy role's `sparkops_render`
filter runs under real ansible-playbook and its output is compared with the CLI's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from sparkops.render import render_inventory
from sparkops.render.templates import CLI_HEADER
from tests.plugins.inventories import make_inventory
from tests.plugins.playbook import run_playbook

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
    for host, hvars in hosts["all"]["children"]["sparks"]["hosts"].items():
        hvars["ansible_connection"] = "local"
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
