"""One topology vocabulary: the inventory's words (pair-dp, multi-dp, pair-pp, single...)
in sparkops_topology and vllm_serving_topology alike; the old serving words still work, with
one warning line that names the word to write."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import pytest
import yaml

from sparkops.errors import UserError
from sparkops.render.inventory import read_inventory
from sparkops.render.settings import DEPRECATED_TOPOLOGIES, TOPOLOGY_OF
from sparkops.render.stack import plan_stack
from tests.plugins.inventories import make_inventory

SECRETS = {"LITELLM_MASTER_KEY": "sk-test"}
HOSTS_FOR = {
    "single": "single",
    "data-parallel": "data-parallel",
    "pipeline-parallel": "pipeline-ray",
}


def shape(folder, example, word):
    inv = read_inventory(make_inventory(folder, example, vllm_serving_topology=word))
    return {host: stack.role for host, stack in plan_stack(inv, secrets=SECRETS).items()}


@pytest.mark.parametrize("word", sorted(TOPOLOGY_OF))
def test_every_inventory_word_is_a_serving_topology_without_warning(tmp_path, word):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # (Advice: the PP pair of a small model)
        roles = shape(tmp_path, HOSTS_FOR[TOPOLOGY_OF[word]], word)
    expected = {"single": {"single"}, "data-parallel": {"replica"}}.get(
        TOPOLOGY_OF[word], {"head", "worker"}
    )
    assert set(roles.values()) == expected


@pytest.mark.parametrize(
    ("old", "new"), [("data-parallel", "pair-dp"), ("pipeline-parallel", "pair-pp")]
)
def test_the_old_words_still_render_the_same_with_a_warning(tmp_path, old, new):
    example = HOSTS_FOR[old]
    assert new in DEPRECATED_TOPOLOGIES[old]
    message = f"{old} is deprecated, write {DEPRECATED_TOPOLOGIES[old]}"
    with pytest.warns(FutureWarning, match=re.escape(message)):
        before = shape(tmp_path / "old", example, old)
    assert before == shape(tmp_path / "new", example, new)


def test_an_unknown_word_is_refused_with_the_choices(tmp_path):
    with pytest.raises(UserError, match=r"vllm_serving_topology.*pair-dp"):
        shape(tmp_path, "single", "dp")


def test_render_cli_says_the_deprecation_in_one_line(tmp_path):
    inv = make_inventory(tmp_path / "inv", "data-parallel")
    serving = inv / "group_vars" / "all" / "serving.yml"
    data = yaml.safe_load(serving.read_text())
    data["vllm_serving_topology"] = "data-parallel"
    serving.write_text(yaml.safe_dump(data))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkops.cli",
            "render",
            "--inventory",
            str(inv),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "sparkops: warning: vllm_serving_topology: data-parallel is deprecated, write multi-dp "
        "(pair-dp for two Sparks on one QSFP cable), as sparkops_topology does"
    ]
    assert (tmp_path / "out" / "spark-1" / "litellm-config.yaml").is_file()


@pytest.mark.parametrize(
    ("example", "variable", "word", "need"),
    [
        ("single", "vllm_serving_topology", "pair-dp", "at least 2 serving hosts"),
        ("single", "sparkops_topology", "multi-dp", "at least 2 serving hosts"),
        ("data-parallel-4", "sparkops_topology", "pair-pp", "exactly 2 serving hosts"),
        ("data-parallel", "vllm_serving_topology", "wsl2", "exactly 1 serving host,"),
    ],
)
def test_a_wrong_host_count_quotes_the_users_word_and_variable(
    tmp_path, example, variable, word, need
):
    """The message speaks the inventory's vocabulary, never the internal serving shapes."""
    inv = make_inventory(tmp_path / "inv", example)
    serving = inv / "group_vars" / "all" / "serving.yml"
    data = yaml.safe_load(serving.read_text())
    data.pop("vllm_serving_topology")
    data[variable] = word
    serving.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError) as caught:
        plan_stack(read_inventory(inv), secrets=SECRETS)
    message = str(caught.value)
    assert message.startswith(f"topology {word} ({variable}) needs {need}"), message
    assert "data-parallel" not in message and "pipeline-parallel" not in message
