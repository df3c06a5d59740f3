"""The vLLM, Ray and LiteLLM releases the kit pins, read from versions.env beside this module.

versions.env is plain KEY=VALUE so that shell scripts can source it and Docker builds can take
it as build args: one file for every consumer, so the pins cannot drift apart. This module is
the Python side of it (the GB10 base image, the build args of docker/vllm and docker/litellm).
"""

from __future__ import annotations

from importlib.resources import files


def read_pins(text: str) -> dict[str, str]:
    """KEY=VALUE lines, comments and blank lines skipped (the subset a shell sources alike)."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.isidentifier() or not value:
            raise ValueError(f"versions.env: expected KEY=VALUE, got {line!r}")
        pins[key] = value
    return pins


PINS = read_pins(files("sparkops").joinpath("versions.env").read_text())
VLLM_VERSION = PINS["VLLM_VERSION"]
RAY_VERSION = PINS["RAY_VERSION"]
LITELLM_VERSION = PINS["LITELLM_VERSION"]
# docker/vllm's default base: the upstream vLLM image of the pinned release.
VLLM_BASE_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
