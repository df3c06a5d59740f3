"""The router's master key has one owner, sparkops.render.master_key: `sparkops render` and the
litellm_router role both keep the stored key (clients hold it) or generate one the same way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparkops.render import render_inventory
from sparkops.render.master_key import keep_or_generate, new_master_key, stored_master_key
from tests.plugins.inventories import make_inventory
from tests.plugins.playbook import REPO, run_playbook

STORED = "sk-" + "s" * 40
ENV_TEXT = f"# Managed\nLITELLM_TELEMETRY=False\nLITELLM_MASTER_KEY={STORED}\n"

# As deploy.yml: the role keeps or generates the key on the first Spark, then every host
# renders through the same filter; router.env is written where the test reads it.
PLAYBOOK = """
- name: Keep or generate the router's master key on the first Spark
  hosts: sparks[0]
  gather_facts: false
  roles:
    - role: litellm_router

- name: Render the first Spark's router.env through sparkops_render
  hosts: sparks[0]
  gather_facts: false
  tasks:
    - name: Write the rendered router.env
      ansible.builtin.copy:
        content: >-
          {{ (hostvars | sparkops_render(groups, inventory_hostname)).files
             | selectattr('path', 'equalto', 'router.env') | map(attribute='content') | first }}
        dest: "{{ out }}/router.env"
        mode: "0600"
"""


def test_a_stored_key_is_read_from_router_env_text() -> None:
    assert stored_master_key(ENV_TEXT) == STORED
    assert stored_master_key("LITELLM_MASTER_KEY=\nOTHER=1\n") == ""
    assert stored_master_key("") == ""


def test_the_given_key_wins_then_the_stored_one_then_a_new_one() -> None:
    assert keep_or_generate("sk-given", ENV_TEXT) == "sk-given"
    assert keep_or_generate("", "no key here", ENV_TEXT) == STORED
    fresh = keep_or_generate("", "")
    assert fresh.startswith("sk-") and len(fresh) == 46
    assert fresh != new_master_key()  # random each time


def test_sparkops_render_keeps_the_key_of_an_earlier_render(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LITELLM_MASTER_KEY", raising=False)
    inventory = make_inventory(tmp_path / "inv", "data-parallel")
    (tmp_path / "out" / "spark-1").mkdir(parents=True)
    (tmp_path / "out" / "spark-1" / "router.env").write_text(ENV_TEXT)
    render_inventory(inventory, tmp_path / "out")
    assert stored_master_key((tmp_path / "out" / "spark-1" / "router.env").read_text()) == STORED


@pytest.mark.parametrize("stored", [True, False], ids=["stored-key-kept", "no-key-generated"])
def test_the_litellm_router_role_keeps_or_generates_the_key_as_render_does(
    tmp_path: Path, stored: bool
) -> None:
    stack = tmp_path / "stack"
    stack.mkdir()
    if stored:
        (stack / "router.env").write_text(ENV_TEXT)
    inventory = make_inventory(
        tmp_path / "inv",
        "data-parallel",
        vllm_serving_stack_dir=str(stack),
        ansible_connection="local",
        ansible_python_interpreter=sys.executable,
    )
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    out = tmp_path / "out"
    out.mkdir()
    run = run_playbook(
        tmp_path / "play.yml",
        inventory / "hosts.yml",
        extra_vars={"out": str(out)},
        env={"ANSIBLE_FILTER_PLUGINS": str(REPO / "ansible" / "plugins" / "filter")},
        timeout=300,
    )
    assert run.rc == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Traceback" not in run.output
    key = stored_master_key((out / "router.env").read_text())
    if stored:
        assert key == STORED
    else:
        assert key.startswith("sk-") and len(key) == 46
    assert key not in run.output  # the key is never printed
