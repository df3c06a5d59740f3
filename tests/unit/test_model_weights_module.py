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


# Everything else vLLM reads from the folder at start (issue 43 item 2): a folder holding every
# shard but no tokenizer passed, and the deploy replaced a healthy stack with a crash-looping one.
def served(tmp_path: Path, name: str = "served", *files: str) -> Path:
    """A folder with config.json, one whole safetensors file and `files` (tokenizer files,
    written as small valid JSON or text)."""
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    safetensors(model / "model.safetensors")
    for file in files:
        (model / file).write_text("{}" if file.endswith(".json") else "x")
    return model


def test_weights_without_a_tokenizer_are_refused(tmp_path):
    """The real SmolLM2 folder's files (tests' real model) without tokenizer.json."""
    model = served(tmp_path, "served", "tokenizer_config.json", "generation_config.json")
    problems, names, tokenizer = weights.startup_problems(str(model), [])
    assert problems == [
        "it has no tokenizer (none of tokenizer.json, tokenizer.model, vocab.json with"
        " merges.txt, tekken.json, vocab.txt), and the profile names none (vLLM's --tokenizer"
        " in vllm.extra_args)"
    ]
    assert names == ["model.safetensors"] and tokenizer == ""


def test_each_kind_of_tokenizer_passes(tmp_path):
    for at, files in enumerate(
        [
            ("tokenizer.json", "tokenizer_config.json"),
            ("tokenizer.model", "tokenizer_config.json"),
            ("tokenizer.model",),
            ("vocab.json", "merges.txt"),
            ("tekken.json",),
        ]
    ):
        problems, _, tokenizer = weights.startup_problems(
            str(served(tmp_path, f"m{at}", *files)), []
        )
        assert problems == [], files
        assert tokenizer and tokenizer.split(" + ")[0] == files[0]


def test_a_broken_tokenizer_or_config_is_named(tmp_path):
    model = served(tmp_path, "broken", "tokenizer_config.json")
    (model / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0')  # cut short
    (model / "config.json").unlink()
    problems, _, _ = weights.startup_problems(str(model), [])
    assert problems[0] == "config.json is missing"
    assert problems[1].startswith("tokenizer.json cannot be read as JSON (")
    assert len(problems) == 2
    (model / "config.json").write_text("[]")
    (model / "tokenizer.json").write_text("")
    (model / "tokenizer_config.json").write_text("{")
    problems, _, _ = weights.startup_problems(str(model), [])
    assert problems[:2] == ["config.json is JSON but not an object", "tokenizer.json is empty"]
    assert problems[2].startswith("tokenizer_config.json cannot be read as JSON (")
    # vocab.json without merges.txt is no tokenizer.
    half = served(tmp_path, "half", "vocab.json")
    assert weights.startup_problems(str(half), [])[0][0].startswith("it has no tokenizer")


def test_a_tokenizer_link_out_of_the_folder_is_named(tmp_path):
    """A Hugging Face snapshot copied without -L: the tokenizer is a link into blobs/."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (blobs / "f00d").write_text("{}")
    model = served(tmp_path)
    (model / "tokenizer.json").symlink_to(blobs / "f00d")
    problems, _, _ = weights.startup_problems(str(model), [])
    assert problems == [
        f"tokenizer.json is a link to {blobs / 'f00d'}, outside the folder: the container"
        " mounts only the folder, where the link leads nowhere"
    ]


def test_the_profile_s_tokenizer_stands_in_for_the_folder_s(tmp_path):
    model = served(tmp_path)
    command = ["vllm", "serve", str(model), "--tokenizer", "org/tokenizer", "--seed", "1"]
    assert weights.startup_problems(str(model), command) == (
        [],
        ["model.safetensors"],
        "--tokenizer org/tokenizer",
    )
    # A folder named with --tokenizer=PATH is checked like the model folder.
    elsewhere = tmp_path / "tok"
    elsewhere.mkdir()
    problems, _, _ = weights.startup_problems(str(model), [f"--tokenizer={elsewhere}"])
    assert problems == [
        f"its --tokenizer {elsewhere}: it has no tokenizer (none of tokenizer.json,"
        " tokenizer.model, vocab.json with merges.txt, tekken.json, vocab.txt)"
    ]
    (elsewhere / "tokenizer.json").write_text("{}")
    assert weights.startup_problems(str(model), ["--tokenizer", str(elsewhere)])[0] == []
    gone = tmp_path / "gone"
    assert weights.startup_problems(str(model), ["--tokenizer", str(gone)])[0] == [
        f"the profile's --tokenizer {gone} is not a folder"
    ]


def test_gguf_weights_carry_their_own_tokenizer(tmp_path):
    model = tmp_path / "gguf"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model-q4.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    assert weights.startup_problems(str(model), []) == (
        [],
        ["model-q4.gguf"],
        "the GGUF file's own",
    )
