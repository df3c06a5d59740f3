"""sparkops.inputs: every way a user's YAML/JSON file can be wrong is one UserError naming
the file, the line and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops.errors import UserError
from sparkops.inputs import read_json, read_yaml

FIX = "fix the thing"


def _error(reader, path: Path, **kw) -> str:
    with pytest.raises(UserError) as caught:
        reader(path, what="profile", fix=FIX, **kw)
    return str(caught.value)


def test_a_good_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: x\nn: 2\n")
    (tmp_path / "a.json").write_text('{"n": [1, 2]}')
    assert read_yaml(tmp_path / "a.yaml", what="profile", fix=FIX) == {"name": "x", "n": 2}
    assert read_json(tmp_path / "a.json", what="profile", fix=FIX) == {"n": [1, 2]}
    (tmp_path / "l.json").write_text("[1]")
    assert read_json(tmp_path / "l.json", what="x", fix=FIX, top=list) == [1]


def test_missing_and_unreadable_files_name_the_file_and_the_fix(tmp_path: Path) -> None:
    assert _error(read_yaml, tmp_path / "no.yaml") == (
        f"profile {tmp_path / 'no.yaml'} does not exist; {FIX}"
    )
    assert _error(read_json, tmp_path) == (
        f"profile {tmp_path} cannot be read (IsADirectoryError); {FIX}"
    )
    (tmp_path / "bin.yaml").write_bytes(b"name: \xff\xfe\n")
    assert "is not UTF-8 text (byte 6); fix the thing" in _error(read_yaml, tmp_path / "bin.yaml")


def test_a_syntax_error_names_the_line_and_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvllm:\n  args: [1, 2\nother: 3\n")
    message = _error(read_yaml, bad)
    assert message.startswith(f"profile {bad} is not valid YAML (line 4: ")
    assert message.endswith(f"; {FIX}")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{\n  "a": 1,\n}\n')
    assert _error(read_json, bad_json) == (
        f"profile {bad_json} is not valid JSON (line 3: Expecting property name enclosed in "
        f"double quotes); {FIX}"
    )


def test_the_wrong_kind_of_document_is_refused(tmp_path: Path) -> None:
    (tmp_path / "l.yaml").write_text("- a\n- b\n")
    (tmp_path / "e.yaml").write_text("")
    (tmp_path / "l.json").write_text("[1, 2]")
    assert _error(read_yaml, tmp_path / "l.yaml") == (
        f"profile {tmp_path / 'l.yaml'} is not a YAML mapping (it holds a list); {FIX}"
    )
    assert "is not a YAML mapping (it holds nothing)" in _error(read_yaml, tmp_path / "e.yaml")
    assert _error(read_json, tmp_path / "l.json") == (
        f"profile {tmp_path / 'l.json'} is not a JSON object (it holds a list); {FIX}"
    )
    assert read_yaml(tmp_path / "e.yaml", what="x", fix=FIX, top=None) is None
