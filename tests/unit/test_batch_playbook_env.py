"""batch.yml's job unit gets sparkops.privacy's environment, not a hand-kept copy of it.

The unit's Environment= lines come from the `sparkops_private_env` filter (the one list in
sparkops.privacy) through the job's spec: the expression batch.yml holds is run by a real
ansible-playbook on the controller, rendered into the unit by the `sparkops_batch_unit` filter,
and must give every variable of private_env() and nothing else.
"""

from __future__ import annotations

import json
import sys

import yaml

from sparkops.privacy import private_env
from tests.plugins.playbook import PLAYBOOKS, run_playbook

SPEC = "_sparkops_batch_spec"


def _job_play() -> dict:
    plays = yaml.safe_load((PLAYBOOKS / "batch.yml").read_text(encoding="utf-8"))
    (play,) = [play for play in plays if SPEC in play.get("vars", {})]
    return play


def test_batch_yml_hard_codes_no_privacy_variable() -> None:
    text = json.dumps(_job_play())
    for name in private_env():
        assert f"{name}=" not in text and f'"{name}"' not in text, name
    assert "sparkops_private_env" in json.dumps(_job_play()["vars"][SPEC]["environment"])


def test_the_job_unit_gets_every_privacy_variable_from_the_one_list(tmp_path) -> None:
    expression = _job_play()["vars"][SPEC]["environment"]
    spec = {
        "name": "env", "user": "researcher", "out": "/srv/out", "command": "/bin/sparkops",
        "run_argv": ["/bin/sparkops", "batch", "run"], "endpoints": ["http://h:8000"],
    }  # fmt: skip
    playbook = tmp_path / "environment.yml"
    (tmp_path / "filter_plugins").symlink_to(PLAYBOOKS / "filter_plugins")
    task = {
        "name": "Write the unit batch.yml would install",
        "ansible.builtin.copy": {
            "content": "{{ spec | combine({'environment': job_env}) | sparkops_batch_unit }}",
            "dest": str(tmp_path / "job.service"),
            "mode": "0600",
        },
        "vars": {"job_env": expression, "spec": spec},
    }
    play = {"name": "Render", "hosts": "localhost", "connection": "local",
            "gather_facts": False, "tasks": [task]}  # fmt: skip
    playbook.write_text(yaml.safe_dump([play]), encoding="utf-8")
    done = run_playbook(
        playbook,
        "localhost,",
        extra_vars={"ansible_python_interpreter": sys.executable},
        timeout=120,
    )
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    unit = (tmp_path / "job.service").read_text(encoding="utf-8").splitlines()
    shown = [line for line in unit if line.startswith("Environment=")]
    assert shown == [f'Environment="{key}={value}"' for key, value in private_env().items()]
    assert 'Environment="HF_HUB_OFFLINE=1"' in shown and 'Environment="DO_NOT_TRACK=1"' in shown
