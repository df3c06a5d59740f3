"""The deploy's weight check (ansible/plugins/modules/sparkops_model_weights.py, issue 34 item
3) on hostile model folders: no weights, an index naming a missing shard, a shard cut short, an
empty one, a header that is not safetensors, links into a Hugging Face cache's blobs and a
dangling link. The deploy refusing such a folder with the running stack untouched runs for real
in tests/infra/test_deploy_converge.py."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

MODULE = Path(__file__).resolve().parents[2] / "ansible" / "plugins" / "modules"
spec = importlib.util.spec_from_file_location(
    "sparkops_model_weights", MODULE / "sparkops_model_weights.py"
)
weights = importlib.util.module_from_spec(spec)
spec.loader.exec_module(weights)


def safetensors(path: Path, data_bytes: int = 16, cut: int = 0) -> None:
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [data_bytes // 4], "data_offsets": [0, data_bytes]}}
    ).encode()
    blob = struct.pack("<Q", len(header)) + header + b"\0" * data_bytes
    path.write_bytes(blob[: len(blob) - cut])


def folder(tmp_path: Path, name: str = "model") -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text("{}")
    return path


def index(path: Path, *shards: str) -> None:
    weight_map = {f"t{i}": shard for i, shard in enumerate(shards)}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_a_whole_folder_passes(tmp_path):
    model = folder(tmp_path)
    safetensors(model / "model-00001-of-00002.safetensors")
    safetensors(model / "model-00002-of-00002.safetensors", 64)
    index(model, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    assert weights.check(str(model)) == (
        [],
        ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
    )
    single = folder(tmp_path, "single")
    safetensors(single / "model.safetensors")
    assert weights.check(str(single))[0] == []


def test_a_folder_with_only_config_json_has_no_weights(tmp_path):
    problems, _ = weights.check(str(folder(tmp_path)))
    assert problems == [
        "it has no weights (no *.safetensors, pytorch_model*.bin or *.gguf, no index naming them)"
    ]


def test_every_shard_the_index_names_is_checked(tmp_path):
    model = folder(tmp_path)
    safetensors(model / "a.safetensors", 64, cut=10)
    (model / "b.safetensors").write_bytes(b"")
    (model / "c.safetensors").write_bytes(b"not a safetensors file at all")
    index(model, "a.safetensors", "b.safetensors", "c.safetensors", "d.safetensors")
    problems, _ = weights.check(str(model))
    header_len = len(
        json.dumps({"w": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}).encode()
    )
    assert problems == [
        f"a.safetensors is cut short: {8 + header_len + 54} bytes, where its header needs"
        f" {8 + header_len + 64}",
        "b.safetensors is empty",
        "c.safetensors has no readable safetensors header (cut short, or not safetensors)",
        "d.safetensors is missing (the index names it)",
    ]


def test_links_into_a_cache_s_blobs_and_dangling_links_are_named(tmp_path):
    """A snapshot of the Hugging Face cache: its files are links into ../../blobs, which the
    container (it mounts only the folder) does not see."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    safetensors(blobs / "abc123")
    model = folder(tmp_path)
    (model / "model.safetensors").symlink_to(blobs / "abc123")
    problems, _ = weights.check(str(model))
    assert problems == [
        f"model.safetensors is a link to {blobs / 'abc123'}, outside the folder: the container"
        " mounts only the folder, where the link leads nowhere"
    ]
    (blobs / "abc123").unlink()
    problems, _ = weights.check(str(model))
    assert problems == [f"model.safetensors is a link to {blobs / 'abc123'}, which does not exist"]
    # A link inside the folder is what `cp -rL` would make whole anyway: it is served.
    inside = folder(tmp_path, "inside")
    safetensors(inside / "real.bin.safetensors")
    (inside / "model.safetensors").symlink_to("real.bin.safetensors")
    index(inside, "model.safetensors")
    assert weights.check(str(inside))[0] == []
