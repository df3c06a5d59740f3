"""The secrets' env files as compose reads them (issue 34 item 4): any key reaches the container
unchanged. sparkops.render.envfile writes and reads them; the readiness module, which runs on
the host without the package, reads them with its own copy of the rule, which must agree.
tests/infra/test_deploy_converge.py deploys with such a key and checks the one vLLM runs with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sparkops.errors import UserError
from sparkops.render import envfile
from sparkops.render.master_key import stored_master_key
from sparkops.render.settings import split_prefixed

MODULE = Path(__file__).resolve().parents[2] / "ansible" / "plugins" / "modules"
spec = importlib.util.spec_from_file_location(
    "sparkops_vllm_ready", MODULE / "sparkops_vllm_ready.py"
)
ready = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ready)

HOSTILE = [
    "sk-a$HOME b",
    "sk-${HOME}-$$-$",
    "q'uo\"te`bt`",
    "100%PATH%",
    "back\\slash",
    "ends\\",
    'a\\"b',
    "has #hash",
    " lead and trail ",
    "tab\there",
    "'",
    '"',
    "a=b",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_is_quoted_and_reads_back_unchanged(value, tmp_path):
    line = f"VLLM_API_KEY={envfile.quote(value)}\n"
    assert line.count("\n") == 1
    assert envfile.read("# secrets\n" + line) == {"VLLM_API_KEY": value}
    # The readiness module (on the host) reads the same value.
    (tmp_path / "serving.env").write_text(line)
    assert ready.read_api_key(str(tmp_path / "serving.env")) == value
    # `$` is always doubled: compose would otherwise interpolate it.
    quoted = envfile.quote(value)
    assert quoted.count("$") == 2 * value.count("$")


def test_plain_values_stay_unquoted_for_docker_run_env_file():
    """`docker run --env-file` (the model fetch) reads no quotes: a token stays as written."""
    for value in ("hf_AbC123", "sk-" + "x" * 43, "sk-abc_DEF-123.4:5/6+7=8@9"):
        assert envfile.quote(value) == value
    assert stored_master_key(f"LITELLM_MASTER_KEY={envfile.quote('sk-a$b c')}\n") == "sk-a$b c"


def test_a_key_with_a_line_break_is_refused_without_showing_it():
    secret = "sk-first\nsecond"
    with pytest.raises(UserError) as err:
        split_prefixed("spark-1", {"vllm_serving_api_key": secret})
    assert "vllm_serving_api_key" in str(err.value) and "line break" in str(err.value)
    assert "sk-first" not in str(err.value)
