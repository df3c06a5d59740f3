"""Mistakes a new user makes with `sparkops render`, run as the user runs it (a subprocess):
exit status 2, one line on stderr naming the problem and the fix, no traceback, nothing
written."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from sparkops.render.settings import TOPOLOGY_OF
from sparkops.versions import VLLM_VERSION
from tests.plugins.cli import sparkops
from tests.plugins.inventories import make_inventory

PROFILES = Path(__file__).resolve().parents[2] / "src" / "sparkops" / "profiles"

REPO = Path(__file__).resolve().parents[2]


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


def _with_vars(inventory: Path, **variables: object) -> Path:
    serving = inventory / "group_vars" / "all" / "serving.yml"
    data = yaml.safe_load(serving.read_text())
    data.pop("vllm_serving_topology", None)
    serving.write_text(yaml.safe_dump({**data, **variables}))
    return inventory


@pytest.mark.parametrize(
    ("example", "variable", "word", "hint"),
    [
        ("single", "sparkops_topology", "singel", " (did you mean single?)"),
        ("pipeline-ray", "sparkops_topology", "pair_pp", " (did you mean pair-pp?)"),
        ("data-parallel", "vllm_serving_topology", "multidp", " (did you mean multi-dp?)"),
        ("single", "sparkops_topology", "cluster", ""),
    ],
)
def test_an_unknown_topology_is_refused_naming_the_valid_ones(
    tmp_path: Path, example: str, variable: str, word: str, hint: str
) -> None:
    """A misspelt word used to render a single stack (exit 0), or to ask for one host. The
    sentence is validate_inventory.yml's (one check, sparkops.render.inventory_checks)."""
    inventory = _with_vars(make_inventory(tmp_path / "inv", example), **{variable: word})
    where = "topology.yml" if variable == "sparkops_topology" else "serving.yml"
    assert _refused("--inventory", str(inventory), cwd=tmp_path) == (
        f"Host spark-1: {variable} is '{word}', which is not a topology{hint}. Set it to one of "
        f"single, wsl2, local, pair-dp, pair-pp, multi-dp in group_vars/all/{where}."
    )


def test_every_example_inventory_names_every_topology_in_its_comment() -> None:
    for path in sorted((REPO / "inventory").glob("*/group_vars/all/topology.yml")):
        comment = path.read_text()
        for word in TOPOLOGY_OF:
            assert re.search(rf"\b{word}\b", comment.split("sparkops_topology:")[0]), (path, word)


def test_a_gpu_memory_budget_too_small_names_the_variable_that_sets_it(tmp_path: Path) -> None:
    inventory = make_inventory(tmp_path / "inv", "single")
    _with_vars(inventory, vllm_serving_gpu_memory_gib=20)
    proc = sparkops("render", "--inventory", str(inventory), "--out", "out", limit=60, cwd=tmp_path)
    assert proc.returncode == 2 and not (tmp_path / "out").exists(), proc.stderr
    # one problem per line under one heading (every problem at once, fixed in one pass)
    assert proc.stderr.splitlines() == [
        "sparkops: error: the serving stack cannot start as configured:",
        "  profile gb10-gemma4-12b-fp8: weights (13.5 GiB) + KV cache need 73.5 GiB, over "
        "spark-1's GPU memory budget of 20.0 GiB: lower vllm.kv_cache_memory_bytes, or raise "
        "the host's GPU memory (NVIDIA app on the laptop) and its vllm_serving_gpu_memory_gib "
        "in the inventory",
    ]


@pytest.mark.parametrize("cache", [".cache", "rel/cache", ""])
def test_the_local_inventory_renders_with_a_relative_or_no_cache(
    tmp_path: Path, cache: str
) -> None:
    """inventory/local builds its model folder from SPARKOPS_CACHE: a relative one is taken
    from the folder the command runs in (as sparkops.cache does), none means the checkout's."""
    env = {**os.environ, "SPARKOPS_CACHE": cache}
    proc = sparkops(
        "render", "--inventory", str(REPO / "inventory" / "local"), "--out", "out",
        limit=60, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    compose = yaml.safe_load((tmp_path / "out" / "localhost" / "compose.yml").read_text())
    expected = (tmp_path / cache if cache else REPO / ".cache").resolve() / "models" / "tiny"
    assert f"{expected}:{expected}:ro" in compose["services"]["vllm"]["volumes"]


def test_a_relative_model_folder_says_to_set_an_absolute_path(tmp_path: Path) -> None:
    inventory = _with_vars(
        make_inventory(tmp_path / "inv", "single"), vllm_serving_model_dir=".cache/models/tiny"
    )
    assert _refused("--inventory", str(inventory), cwd=tmp_path) == (
        "inventory host spark-1: vllm_serving_model_dir: Value error, '.cache/models/tiny' must "
        "be an absolute path (it is bind-mounted): write it absolute, or, where it is built "
        "from SPARKOPS_CACHE, set an absolute SPARKOPS_CACHE. Fix the inventory's group_vars."
    )


PP_ADVICE = (
    "sparkops: warning: profile gb10-gemma4-12b-fp8 fits one Spark (weights + KV cache 73.5 "
    "GiB of a 110 GiB budget): pipeline parallel over two only slows it; serve it data "
    "parallel (sparkops_topology: pair-dp, a replica per Spark), or give pair-pp a model that "
    "needs two Sparks (e.g. the gb10-qwen25-72b-bf16 profile)"
)


def test_the_pair_pp_example_serves_a_model_that_needs_two_sparks(tmp_path: Path) -> None:
    """inventory/pair-pp renders its 72B BF16 profile without advice; each Spark holds half
    the weights, so the memory guard's start bar fits a Spark; one Spark refuses it."""
    env = {**os.environ, "SPARKOPS_CACHE": str(tmp_path / "cache")}
    pair = REPO / "inventory" / "pair-pp"
    proc = sparkops(
        "render", "--inventory", str(pair), "--out", "out", limit=60, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for host in ("spark-a", "spark-b"):
        guard = (tmp_path / "out" / host / "memory-guard.sh").read_text()
        bar = int(re.search(r"else bar=(\d+);", guard).group(1))
        assert 100e9 < bar < 120e9, bar  # half of 145 GB + 25.8 GB cache + activations, margin
    single = _with_vars(
        make_inventory(tmp_path / "one", "single"),
        vllm_serving_profile="gb10-qwen25-72b-bf16",
        vllm_serving_gpu_memory_gib=110,
        vllm_serving_concurrency=256,
    )
    one = sparkops("render", "--inventory", str(single), "--out", "one-out", limit=60, cwd=tmp_path)
    assert one.returncode == 2 and "Traceback" not in one.stderr
    assert one.stderr == (
        "sparkops: error: Host spark-1: profile gb10-qwen25-72b-bf16 has 135.4 GiB of weights, "
        "more than the machine's 128 GB (119.2 GiB) of memory in all, before any KV cache: it "
        "cannot load. Choose a smaller or quantised profile, or split it over two Sparks "
        "(sparkops_topology: pair-pp, each Spark holds half).\n"
    )


@pytest.mark.parametrize("budget", [None, 110])
def test_a_pipeline_pair_for_a_model_that_fits_one_spark_is_advised_against(
    tmp_path: Path, budget: int | None
) -> None:
    extra = {} if budget is None else {"vllm_serving_gpu_memory_gib": budget}
    inventory = make_inventory(tmp_path / "inv", "pipeline-ray", **extra)
    proc = sparkops("render", "--inventory", str(inventory), "--out", "out", limit=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [PP_ADVICE]
    assert (tmp_path / "out" / "spark-2" / "compose.yml").is_file()  # the render went on


def _base_line(inventory: Path, cwd: Path) -> list[str]:
    proc = sparkops("render", "--inventory", str(inventory), "--out", "out", limit=60, cwd=cwd)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [line for line in proc.stdout.splitlines() if line.startswith("vLLM base image: ")]


def test_a_profile_names_its_own_base_and_the_inventory_s_wins(tmp_path: Path) -> None:
    """Issue 24 item 1: a profile may name the arm64 vLLM image it was measured on; the render
    builds FROM it (pinned like the default) and says whose choice it is; the inventory's
    vllm_serving_base_image still wins."""
    profile = yaml.safe_load((PROFILES / "gb10-gemma4-12b-fp8.yaml").read_text())
    profile.update(name="lab-gemma", base_image="lab/vllm-gb10:26.01")
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(profile))
    inventory = make_inventory(tmp_path / "inv", "single")
    _with_vars(inventory, vllm_serving_profile=str(tmp_path / "lab.yaml"))
    [line] = _base_line(inventory, tmp_path)
    assert line.startswith("vLLM base image: lab/vllm-gb10:26.01, no digest pinned yet: ")
    assert line.endswith(". The lab-gemma profile names this base")
    record = json.loads((tmp_path / "out" / "spark-1" / "stack-record.json").read_text())
    assert record["base_image"] == "lab/vllm-gb10:26.01"

    _with_vars(inventory, vllm_serving_base_image="site/vllm:1")
    [line] = _base_line(inventory, tmp_path)
    assert line.startswith("vLLM base image: site/vllm:1, no digest pinned yet: ")
    assert "profile names" not in line
    # a profile may not carry a digest in its base: the deploy pins one
    profile["base_image"] = "lab/vllm-gb10@sha256:" + "ab" * 32
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump(profile))
    (tmp_path / "again").mkdir()
    message = _refused("--inventory", str(inventory), cwd=tmp_path / "again")
    assert "base_image" in message


def test_render_says_which_base_image_and_digest_the_deploy_builds_from(tmp_path: Path) -> None:
    base = f"vllm/vllm-openai:v{VLLM_VERSION}"
    digest = "sha256:" + "ab" * 32
    inventory = make_inventory(tmp_path / "inv", "single")
    assert _base_line(inventory, tmp_path) == [
        f"vLLM base image: {base}, no digest pinned yet: the deploy pulls it on the Spark once "
        f"and pins the digest it gets in {inventory / '.sparkops-base-image.yml'} (or set "
        "vllm_serving_base_digest)"
    ]
    # (a lock file inside the inventory folder is read by Ansible as one more inventory
    # source, with warnings: this one lies outside it, through vllm_serving_base_lock)
    lock = tmp_path / "base-lock.yml"
    _with_vars(inventory, vllm_serving_base_lock=str(lock))
    lock.write_text(yaml.safe_dump({"image": base, "digest": digest}))  # as the deploy writes it
    assert _base_line(inventory, tmp_path) == [
        f"vLLM base image: {base}@{digest} (pinned by an earlier deploy in {lock}; "
        "-e vllm_serving_update_base=true moves it to what the tag points to now)"
    ]
    _with_vars(inventory, vllm_serving_update_base=True)  # an Ansible-only setting: accepted
    assert _base_line(inventory, tmp_path) == [
        f"vLLM base image: {base}, pinned at {digest} in {lock}; vllm_serving_update_base is "
        "set, so the deploy pulls the tag again and moves the pin to what it points to now "
        "(it shows old -> new)"
    ]
    _with_vars(inventory, vllm_serving_base_digest="sha256:" + "cd" * 32)
    assert _base_line(inventory, tmp_path) == [
        f"vLLM base image: {base}@sha256:{'cd' * 32} (vllm_serving_base_digest in the inventory)"
    ]
    # a stack of an image the kit does not build (the CPU stand-in) says nothing of a base
    env = {**os.environ, "SPARKOPS_CACHE": str(tmp_path / "cache")}
    local = sparkops(
        "render", "--inventory", str(REPO / "inventory" / "local"), "--out", "local",
        limit=60, cwd=tmp_path, env=env, check=True,
    )  # fmt: skip
    assert "vLLM base image" not in local.stdout


def test_the_laptop_inventory_says_how_to_serve_a_64_gb_unit(tmp_path: Path) -> None:
    """Issue 31 item 3: not every RTX Spark has 128 GB. The wsl2 inventory's own comment names
    the settings of a 64 GB unit; with exactly those, render passes the memory guard and
    serves the 64 GB profile (256 sequences, a 16 GiB KV cache)."""
    import shutil

    inventory = tmp_path / "wsl2"
    shutil.copytree(REPO / "inventory" / "wsl2", inventory)
    serving = inventory / "group_vars" / "all" / "serving.yml"
    text = serving.read_text()
    comment = text.split("A 64 GB unit:")[1].split("\nvllm_")[0]  # up to the first setting
    named = dict(re.findall(r"(vllm_serving_\w+): ([\w.-]+)", comment))
    assert named["vllm_serving_profile"] == "gb10-gemma4-12b-fp8-64gb", named
    settings = yaml.safe_load(text)
    settings.update({k: yaml.safe_load(v) for k, v in named.items() if k in settings})
    for line in text.splitlines():  # the commented totals, as a user uncomments them
        if line.startswith("# vllm_serving_memory_"):
            key, value = line.removeprefix("# ").split("#")[0].split(":")
            settings[key.strip()] = yaml.safe_load(value)
    assert settings["vllm_serving_memory_total_gb"] == 64, settings
    serving.write_text(yaml.safe_dump(settings))
    done = sparkops("render", "--inventory", str(inventory), "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    compose = (tmp_path / "out" / "rtx-spark" / "compose.yml").read_text()
    argv = re.findall(r'- "([^"]*)"', compose)
    assert argv[argv.index("--max-num-seqs") + 1] == "256"
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(16 * 2**30)
