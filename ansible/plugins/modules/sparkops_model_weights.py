#!/usr/bin/python
"""Ansible module `sparkops_model_weights`: does a local model folder hold its weights?

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

Read-only: it never changes the host (check mode runs it too). Returns `problems`, one
sentence each, and `weights`, the files it checked.
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
"""

RETURN = r"""
problems: {description: One sentence per problem (none when the weights are whole), type: list}
weights: {description: The weight files checked, relative to the folder, type: list}
"""

INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")
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
        path = os.path.join(folder, name)
        real = os.path.realpath(path)
        if os.path.islink(path) and not os.path.exists(path):
            problems.append(f"{name} is a link to {os.readlink(path)}, which does not exist")
            continue
        if not os.path.exists(path):
            problems.append(f"{name} is missing (the index names it)")
            continue
        if not _inside(real, real_folder):
            problems.append(
                f"{name} is a link to {real}, outside the folder: the container mounts only "
                "the folder, where the link leads nowhere"
            )
            continue
        if not os.path.isfile(real):
            problems.append(f"{name} is not a file")
            continue
        size = os.path.getsize(real)
        if size == 0:
            problems.append(f"{name} is empty")
            continue
        if name.endswith(".safetensors"):
            problem = safetensors_problem(real, name, size)
            if problem:
                problems.append(problem)
    return problems, names


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}}, supports_check_mode=True
    )
    problems, names = check(module.params["path"])
    module.exit_json(changed=False, problems=problems, weights=names)


if __name__ == "__main__":
    main()
