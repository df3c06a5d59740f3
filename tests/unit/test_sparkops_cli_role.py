"""The sparkops_cli role's contract: defaults and argument_specs list the same variables with the
same defaults (the spec documents and validates what defaults/main.yml sets)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "sparkops_cli"


def test_defaults_and_argument_specs_agree() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, option in options.items():
        assert name.startswith("sparkops_cli_")
        assert option.get("description"), name
        assert option["default"] == defaults[name], name


def test_provision_installs_the_kit_on_every_spark() -> None:
    plays = yaml.safe_load((ROLE.parents[1] / "playbooks" / "provision.yml").read_text())
    (play,) = [p for p in plays if "roles" in p and p["roles"][0]["role"] == "sparkops_cli"]
    assert play["hosts"] == "sparks" and play["become"] is True
    assert play["roles"][0]["tags"] == ["sparkops_cli"]
