"""Mistakes a new user makes with `sparkops render`, run as the user runs it (a subprocess):
exit status 2, one line on stderr naming the problem and the fix, no traceback, nothing
written."""

from __future__ import annotations

from pathlib import Path

from tests.plugins.cli import sparkops
from tests.plugins.inventories import make_inventory


def _refused(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """The one stderr line of a refused `sparkops render ...` (exit 2, nothing written)."""
    proc = sparkops("render", *args, "--out", "out", limit=60, cwd=cwd, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkops: error: "), proc.stderr
    assert not (cwd / "out").exists()
    return lines[0].removeprefix("sparkops: error: ")


def test_a_profile_with_a_yaml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    inventory = make_inventory(tmp_path / "inv", "single")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodel: x\nvllm:\n  max_num_seqs: [1\n")
    message = _refused("--inventory", str(inventory), "--profile", str(bad), cwd=tmp_path)
    assert message.startswith(f"profile {bad} is not valid YAML (line 5: ")
    assert message.endswith("; fix the profile file (the schema is sparkops/profiles/schema.py)")
    bad.write_text("- a list\n")
    assert _refused("--inventory", str(inventory), "--profile", str(bad), cwd=tmp_path) == (
        f"profile {bad} is not a YAML mapping (it holds a list); fix the profile file (the "
        "schema is sparkops/profiles/schema.py)"
    )
