#!/usr/bin/python
"""Ansible module `sparkops_model_weights`: does a local model folder hold what vLLM needs?

A folder with config.json but no weights (a copy that carried only the small files, an index
naming shards that never arrived, a shard cut short, files that are links into a Hugging Face
cache's blob store that the container never sees) passes a config.json check, and vLLM then
crash-loops with a log tail that ends "See root cause above". The deploy asks this module
before it changes anything, on the host, with the host's python3 and the standard library only:

- the weights the folder's index files name (`*.safetensors.index.json`, `*.bin.index.json`:
  every shard in `weight_map`), else every `*.safetensors` / `pytorch_model*.bin` in it, and at
  least one of them;
- each one present, a file (a link is followed: one that leads nowhere is named as dangling),
  inside the folder once links are resolved (the container mounts only the folder, so a link
  into the cache's `blobs/` is a missing file there), and not empty;
- a safetensors file's header readable (an 8-byte length, then a JSON object), and the file as
  long as its header says (a copy cut short is named with both sizes).

Weights are not all vLLM reads at start (issue 43 item 2: a folder with every shard but no
tokenizer passed, and the deploy replaced a healthy stack with one that crash-looped), so it
also checks, the same way (present, inside the folder, not empty, readable):

- config.json, a JSON object;
- a tokenizer: tokenizer.json (a fast tokenizer), tokenizer.model (SentencePiece),
  vocab.json with merges.txt (byte-level BPE) or tekken.json (Mistral's), with any
  tokenizer_config.json and the JSON ones readable as JSON; not asked where vLLM loads
  another (`--tokenizer` in the rendered command, given as `command`) or the weights are
  GGUF, which carries its own.

Read-only: it never changes the host (check mode runs it too). Returns `problems`, one
sentence each, `weights`, the files it checked, and `tokenizer`, where vLLM's tokenizer comes
from.
"""

from __future__ import annotations

import json
import os
import struct

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkops_model_weights
short_description: Check that a local model folder holds every weight file, readable
description:
  - Reads the folder's index files (or lists its weight files), follows links, and checks each
    weight file exists inside the folder, is not empty and, for safetensors, has a readable
    header and the length its header gives. Changes nothing.
options:
  path: {description: The model folder, required: true, type: path}
  command:
    description: The rendered vLLM command (its --tokenizer, if any, is what vLLM loads).
    type: list
    elements: str
    default: []
"""

RETURN = r"""
problems: {description: One sentence per problem (none when the weights are whole), type: list}
weights: {description: The weight files checked, relative to the folder, type: list}
tokenizer: {description: The tokenizer files checked, or the --tokenizer vLLM is given, type: str}
"""

INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")
# The files transformers (and vLLM's Mistral mode) build a tokenizer from, one set each.
TOKENIZER_SETS = (
    ("tokenizer.json",),
    ("tokenizer.model",),
    ("vocab.json", "merges.txt"),
    ("tekken.json",),
    ("vocab.txt",),
)
TOKENIZER_SETS_SAID = (
    "tokenizer.json, tokenizer.model, vocab.json with merges.txt, tekken.json, vocab.txt"
)
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the header's length


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def weight_names(folder: str) -> tuple[list[str], list[str]]:
    """(weight file names relative to the folder, problems reading the index files)."""
    names: list[str] = []
    problems: list[str] = []
    entries = sorted(os.listdir(folder))
    indexes = [e for e in entries if e.endswith(INDEX_SUFFIXES)]
    for index in indexes:
        try:
            with open(os.path.join(folder, index), encoding="utf-8") as handle:
                weight_map = json.load(handle)["weight_map"]
            names += sorted({str(v) for v in weight_map.values()} - set(names))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            problems.append(f"{index} cannot be read as a weight index ({err})")
    if not indexes:
        names = [
            e
            for e in entries
            if e.endswith((".safetensors", ".gguf"))
            or (e.startswith("pytorch_model") and e.endswith(".bin"))
        ]
    return names, problems


def safetensors_problem(path: str, name: str, size: int) -> str:
    """Why a safetensors file is not whole ("" when its header reads and its length fits)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                return f"{name} is {size} bytes, too short for a safetensors header"
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or 8 + length > size:
                return f"{name} has no readable safetensors header (cut short, or not safetensors)"
            header = json.loads(handle.read(length))
    except OSError as err:
        return f"{name} cannot be read ({err.strerror})"
    except ValueError:
        return f"{name} has no readable safetensors header (cut short, or not safetensors)"
    if not isinstance(header, dict):
        return f"{name} has no readable safetensors header (cut short, or not safetensors)"
    ends = [
        int(t["data_offsets"][1])
        for k, t in header.items()
        if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t
    ]
    want = 8 + length + max(ends, default=0)
    if size < want:
        return f"{name} is cut short: {size} bytes, where its header needs {want}"
    return ""


def file_problem(folder: str, real_folder: str, name: str, missing: str = "missing") -> str:
    """Why the file `name` of the folder cannot be read in the container ("" when it can):
    missing, a dangling link, a link out of the folder (the container mounts only the
    folder), not a file, empty."""
    path = os.path.join(folder, name)
    real = os.path.realpath(path)
    if os.path.islink(path) and not os.path.exists(path):
        return f"{name} is a link to {os.readlink(path)}, which does not exist"
    if not os.path.exists(path):
        return f"{name} is {missing}"
    if not _inside(real, real_folder):
        return (
            f"{name} is a link to {real}, outside the folder: the container mounts only "
            "the folder, where the link leads nowhere"
        )
    if not os.path.isfile(real):
        return f"{name} is not a file"
    if os.path.getsize(real) == 0:
        return f"{name} is empty"
    return ""


def json_problem(folder: str, name: str, want_object: bool = True) -> str:
    """Why `name` is not readable JSON ("" when it is, an object if `want_object`)."""
    try:
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError) as err:
        return f"{name} cannot be read as JSON ({err})"
    if want_object and not isinstance(value, dict):
        return f"{name} is JSON but not an object"
    return ""


def config_problems(folder: str, real_folder: str) -> list[str]:
    """config.json: there, whole and a JSON object (vLLM reads the architecture from it)."""
    problem = file_problem(folder, real_folder, "config.json") or json_problem(
        folder, "config.json"
    )
    return [problem] if problem else []


def named_tokenizer(command: list[str]) -> str:
    """The tokenizer vLLM is told to load (`--tokenizer X` / `--tokenizer=X`), "" when none."""
    for at, arg in enumerate(command):
        if arg == "--tokenizer" and at + 1 < len(command):
            return command[at + 1]
        if arg.startswith("--tokenizer="):
            return arg.split("=", 1)[1]
    return ""


def tokenizer_problems(folder: str, real_folder: str) -> tuple[list[str], str]:
    """(problems, the tokenizer files found) for a folder vLLM loads its tokenizer from."""
    entries = set(os.listdir(folder))
    found = next((s for s in TOKENIZER_SETS if set(s) <= entries), None)
    if found is None:
        return [f"it has no tokenizer (none of {TOKENIZER_SETS_SAID})"], ""
    problems = []
    for name in [
        *found,
        *(["tokenizer_config.json"] if "tokenizer_config.json" in entries else []),
    ]:
        problem = file_problem(folder, real_folder, name)
        if not problem and name.endswith(".json"):
            problem = json_problem(folder, name)
        if problem:
            problems.append(problem)
    return problems, " + ".join(found)


def startup_problems(folder: str, command: list[str]) -> tuple[list[str], list[str], str]:
    """(problems, weight files, tokenizer) of everything vLLM reads from the folder at start:
    config.json, the weights, the tokenizer (unless another is named or the weights are GGUF)."""
    if not os.path.isdir(folder):
        return [f"{folder} is not a folder"], [], ""
    real_folder = os.path.realpath(folder)
    problems = config_problems(folder, real_folder)
    weight_problems, names = check(folder)
    problems += weight_problems
    tokenizer = named_tokenizer(command)
    if tokenizer.startswith("/"):  # a folder (mounted at the same path): checked the same way
        if not os.path.isdir(tokenizer):
            return [*problems, f"the profile's --tokenizer {tokenizer} is not a folder"], names, ""
        more, _ = tokenizer_problems(tokenizer, os.path.realpath(tokenizer))
        return problems + [f"its --tokenizer {tokenizer}: {p}" for p in more], names, tokenizer
    if tokenizer:  # a hub id
        return problems, names, f"--tokenizer {tokenizer}"
    if names and all(name.endswith(".gguf") for name in names):
        return problems, names, "the GGUF file's own"
    more, tokenizer = tokenizer_problems(folder, real_folder)
    if not tokenizer:
        more = [f"{more[0]}, and the profile names none (vLLM's --tokenizer in vllm.extra_args)"]
    return problems + more, names, tokenizer


def check(folder: str) -> tuple[list[str], list[str]]:
    """(problems, weight files checked) for a model folder."""
    if not os.path.isdir(folder):
        return [f"{folder} is not a folder"], []
    real_folder = os.path.realpath(folder)
    names, problems = weight_names(folder)
    if not names and not problems:
        problems.append(
            "it has no weights (no *.safetensors, pytorch_model*.bin or *.gguf,"
            " no index naming them)"
        )
    for name in names:
        problem = file_problem(folder, real_folder, name, missing="missing (the index names it)")
        if problem:
            problems.append(problem)
            continue
        real = os.path.realpath(os.path.join(folder, name))
        if name.endswith(".safetensors"):
            problem = safetensors_problem(real, name, os.path.getsize(real))
            if problem:
                problems.append(problem)
    return problems, names


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "command": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    problems, names, tokenizer = startup_problems(module.params["path"], module.params["command"])
    module.exit_json(changed=False, problems=problems, weights=names, tokenizer=tokenizer)


if __name__ == "__main__":
    main()
