"""batch.yml's job-unit settings fall back to the sparkops_cli role's own defaults.

The inventory sets them as the role's sparkops_cli_job_* variables (declared in its
meta/argument_specs.yml, so the inventory check refuses a misspelt or mistyped one);
ansible/playbooks/vars/batch.yml reads each with a fallback, which must be the role's default.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAY_VARS = yaml.safe_load((ROOT / "ansible/playbooks/vars/batch.yml").read_text())
ROLE = yaml.safe_load((ROOT / "ansible/roles/sparkops_cli/defaults/main.yml").read_text())
SPECS = yaml.safe_load((ROOT / "ansible/roles/sparkops_cli/meta/argument_specs.yml").read_text())


def test_each_job_setting_falls_back_to_the_role_s_default() -> None:
    pairs = {
        name: value
        for name, value in PLAY_VARS.items()
        if isinstance(value, str) and "sparkops_cli_job_" in value
    }
    assert len(pairs) == 6, pairs
    options = SPECS["argument_specs"]["main"]["options"]
    for name, expression in pairs.items():
        role_var, fallback = re.fullmatch(
            r"\{\{ (sparkops_cli_job_\w+) \| default\((.+), true\) \}\}", expression
        ).groups()
        assert name.removeprefix("sparkops_batch_") == role_var.removeprefix("sparkops_cli_job_")
        assert yaml.safe_load(fallback) == ROLE[role_var] == options[role_var]["default"], name
