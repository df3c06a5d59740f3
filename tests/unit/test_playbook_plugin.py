"""The shared ansible-playbook runner (tests/plugins/playbook.py) reads what Ansible printed.

Every playbook test trusts its recap counts, so they are checked here against a real
ansible-playbook run on the controller: two local hosts, one task changed on both, one failed on
one host, an extra variable passed as JSON, and check mode really reaching Ansible.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml

from tests.plugins.playbook import (
    PLAYBOOKS,
    PlaybookRun,
    Recap,
    finish,
    parse_recap,
    playbook_command,
    start_playbook,
)

PLAY = """
- name: Change something on every host, then fail on one
  hosts: pair
  gather_facts: false
  tasks:
    - name: Run a command that always reports a change
      ansible.builtin.command: "true"
      changed_when: true
    - name: Say the extra variable
      ansible.builtin.debug:
        msg: "marker={{ marker }}"
    - name: Fail on the host the extra variable names
      ansible.builtin.fail:
        msg: "failing {{ inventory_hostname }} on purpose"
      when: inventory_hostname == fail_on
"""


def write(tmp_path: Path) -> tuple[Path, Path]:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = tmp_path / "hosts.yml"
    hosts = {"a": local, "b": local}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"pair": {"hosts": hosts}}}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    return play, inventory


def test_recap_counts_per_host_and_totals_come_from_a_real_run(tmp_path: Path) -> None:
    play, inventory = write(tmp_path)
    variables = {"marker": "m-41", "fail_on": "b"}
    since = time.monotonic()
    real = start_playbook(play, inventory, extra_vars=variables)
    checked = start_playbook(play, inventory, check=True, extra_vars={**variables, "fail_on": "-"})
    run, check = finish(real, timeout=300, since=since), finish(checked, timeout=300)

    assert run.rc == 2, run.output[-3000:]
    assert "Traceback" not in run.output
    assert "marker=m-41" in run.output and "failing b on purpose" in run.output
    assert run.recap["a"].changed == 1 and run.recap["a"].failed == 0
    assert run.recap["b"].changed == 1 and run.recap["b"].failed == 1
    assert (run.changed, run.failed) == (2, 1)
    assert run.changed_on("b") == 1 and run.changed_on("nobody") == -1
    assert run.seconds > 0
    # --check reached Ansible: the command module does not run in check mode.
    assert check.rc == 0, check.output[-3000:]
    assert (check.changed, check.failed) == (0, 0), check.output[-3000:]


def test_a_run_without_a_recap_counts_minus_one() -> None:
    run = PlaybookRun(rc=4, stdout="ERROR! the playbook: nowhere.yml could not be found\n")
    assert run.recap == {} and (run.changed, run.failed) == (-1, -1)


def test_parse_recap_reads_every_counter_and_keeps_the_last_recap() -> None:
    text = (
        "PLAY RECAP ****\n"
        "spark-1                    : ok=3    changed=1    unreachable=0    failed=0    "
        "skipped=2    rescued=0    ignored=1   \n"
        "PLAY RECAP ****\n"
        "spark-1                    : ok=5    changed=0    unreachable=0    failed=1    "
        "skipped=0    rescued=1    ignored=0   \n"
    )
    assert parse_recap(text) == {"spark-1": Recap(5, 0, 0, 1, skipped=0, rescued=1, ignored=0)}


def test_a_bare_playbook_name_is_the_kits_and_options_reach_the_command() -> None:
    command = playbook_command(
        "provision.yml", "inv", "--tags", "x", check=True, diff=True, extra_vars={"k": 1}
    )
    assert Path(command[0]).name == "ansible-playbook"
    assert command[1:] == [
        "-i", "inv", str(PLAYBOOKS / "provision.yml"),
        "-e", '{"k": 1}', "--check", "--diff", "--tags", "x",
    ]  # fmt: skip
    assert (PLAYBOOKS / "provision.yml").is_file()
