"""The real model's cache check: a folder is served only when its manifest and every file's
SHA-256 match (a tampered, truncated or stale conversion is rebuilt, never served)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkops.local import real_model


def _folder(tmp_path: Path, **changes: object) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "config.json").write_text("{}")
    manifest = {
        "converter_version": real_model.CONVERTER_VERSION,
        "source": {"sha256": real_model.GGUF_SHA256},
        "files": {p.name: real_model.sha256(p) for p in folder.iterdir()},
        **changes,
    }
    (folder / real_model.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_intact_folder_is_complete(tmp_path: Path) -> None:
    assert real_model.is_complete(_folder(tmp_path))


def test_changed_or_missing_file_is_not_complete(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "model.safetensors").write_bytes(b"weightz")
    assert not real_model.is_complete(folder)
    (folder / "model.safetensors").unlink()
    assert not real_model.is_complete(folder)


def test_older_converter_or_other_source_is_not_complete(tmp_path: Path) -> None:
    assert not real_model.is_complete(_folder(tmp_path / "a", converter_version=0))
    assert not real_model.is_complete(_folder(tmp_path / "b", source={"sha256": "0" * 64}))
    assert not real_model.is_complete(tmp_path / "nothing-here")
