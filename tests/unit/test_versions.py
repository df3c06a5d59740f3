"""One source for the vLLM, Ray and LiteLLM pins: src/sparkops/versions.env, read by every consumer.

The pins used to be written out in the Dockerfiles, the install scripts, the render settings
and the roles (3 to 5 copies each), so a bump could miss one. These prove no copy is
left and that each consumer really takes its value from the file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkops import versions
from sparkops.profiles import load_profile
from sparkops.render.settings import RouterVars, ServingVars
from sparkops.render.stack import effective_base

REPO = Path(__file__).resolve().parents[2]
PINS_FILE = REPO / "src" / "sparkops" / "versions.env"
# Where a pin could be written out again: code, images, scripts, roles and playbooks.
CONSUMERS = [
    *REPO.glob("docker/*/Dockerfile"),
    *REPO.glob("scripts/**/*.sh"),
    *REPO.glob("src/sparkops/**/*.py"),
    *REPO.glob("src/sparkops/**/*.j2"),
    *REPO.glob("ansible/**/*.yml"),
    *REPO.glob("benchmarks/**/*.sh"),
    REPO / "Makefile",
]


def test_the_file_is_what_python_reads() -> None:
    pins = versions.read_pins(PINS_FILE.read_text())
    assert set(pins) == {"VLLM_VERSION", "RAY_VERSION", "LITELLM_VERSION"}
    assert pins["VLLM_VERSION"] == versions.VLLM_VERSION
    assert pins["RAY_VERSION"] == versions.RAY_VERSION


@pytest.mark.parametrize("key", ["VLLM_VERSION", "RAY_VERSION", "LITELLM_VERSION"])
def test_no_consumer_writes_a_pin_out_again(key: str) -> None:
    value = versions.PINS[key]
    copies = [str(p.relative_to(REPO)) for p in CONSUMERS if value in p.read_text()]
    assert copies == [], f"{key}={value} written out in {copies}: read versions.env instead"


def test_a_malformed_line_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"expected KEY=VALUE, got 'VLLM_VERSION 0\.1'"):
        versions.read_pins("# ok\nVLLM_VERSION 0.1\n")


def test_empty_role_defaults_mean_the_pins() -> None:
    gb10 = load_profile("gb10-gemma4-12b-fp8")
    assert effective_base(ServingVars(), gb10) == f"vllm/vllm-openai:v{versions.VLLM_VERSION}"
    assert effective_base(ServingVars(base_image="lab/vllm:1"), gb10) == "lab/vllm:1"
    assert RouterVars().version == versions.LITELLM_VERSION
    assert RouterVars(version="").version == versions.LITELLM_VERSION
    assert RouterVars(version="1.2.3").version == "1.2.3"


@pytest.mark.parametrize(
    ("environment", "expected"),
    [({}, "pinned"), ({"RAY_VERSION": "9.9.9"}, "9.9.9")],
)
def test_install_scripts_default_to_the_file_and_honour_an_override(
    environment: dict[str, str], expected: str
) -> None:
    """The scripts read the file as PINNED_*, so the environment's RAY_VERSION still wins."""
    script = '. scripts/local/venv-lib.sh; echo "${RAY_VERSION:-$PINNED_RAY_VERSION}"'
    out = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **environment},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    want = versions.RAY_VERSION if expected == "pinned" else expected
    assert out.stdout.strip() == want
    assert out.stderr == ""
