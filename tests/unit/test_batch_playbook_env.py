"""batch.yml starts the job with sparkops.privacy's environment, not a hand-kept copy of it.

The job unit's `--setenv` arguments come from the `sparkops_private_env` filter (the one list in
sparkops.privacy): the expression batch.yml holds is run by a real ansible-playbook on the
controller, and must give every variable of private_env() and nothing else.
"""

from __future__ import annotations

import json
import sys

import yaml

from sparkops.privacy import private_env
from tests.plugins.playbook import PLAYBOOKS, run_playbook

START_TASK = "Start the job with systemd-run"


def _start_task() -> dict:
    plays = yaml.safe_load((PLAYBOOKS / "batch.yml").read_text(encoding="utf-8"))
    tasks = [task for play in plays for task in play.get("tasks", [])]
    (task,) = [task for task in tasks if task.get("name") == START_TASK]
    return task


def test_batch_yml_hard_codes_no_privacy_variable() -> None:
    text = json.dumps(_start_task())
    for name in private_env():
        assert f"--setenv={name}" not in text, name
    assert "sparkops_private_env" in text


def test_the_job_unit_gets_every_privacy_variable_from_the_one_list(tmp_path) -> None:
    expression = _start_task()["vars"]["env_argv"]
    playbook = tmp_path / "env_argv.yml"
    (tmp_path / "filter_plugins").symlink_to(PLAYBOOKS / "filter_plugins")
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Evaluate batch.yml's env_argv",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Write env_argv as JSON",
                            "ansible.builtin.copy": {
                                "content": "{{ env_argv | to_json }}",
                                "dest": str(tmp_path / "env_argv.json"),
                                "mode": "0600",
                            },
                            "vars": {"env_argv": expression},
                        }
                    ],
                }
            ]
        ),
        encoding="utf-8",
    )
    done = run_playbook(
        playbook,
        "localhost,",
        extra_vars={"ansible_python_interpreter": sys.executable},
        timeout=120,
    )
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    shown = json.loads((tmp_path / "env_argv.json").read_text(encoding="utf-8"))
    expected = [f"--setenv={key}={value}" for key, value in private_env().items()]
    assert shown == expected
    assert "--setenv=HF_HUB_OFFLINE=1" in shown and "--setenv=DO_NOT_TRACK=1" in shown
