"""The I/O edge of rendering: read the inventory, gather secrets, write the files.

Everything is validated and rendered in memory first; only then is anything written, so a
bad inventory or profile leaves an existing output folder untouched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sparkops.files import write_atomic
from sparkops.profiles import load_profile
from sparkops.render.base import base_note
from sparkops.render.inventory import read_inventory
from sparkops.render.master_key import ENV_NAME, keep_or_generate
from sparkops.render.stack import plan_stack
from sparkops.render.templates import RenderedFile, render_host

SECRET_NAMES = ("HF_TOKEN", "VLLM_API_KEY", "LITELLM_MASTER_KEY")


def gather_secrets(out: Path) -> dict[str, str]:
    """Secrets from the environment; the router's master key is the environment's, else kept
    from a router.env already under OUT (clients hold it), else generated (render.master_key,
    which the litellm_router role asks too)."""
    found = {name: os.environ[name] for name in SECRET_NAMES if os.environ.get(name)}
    stored = [env_file.read_text() for env_file in sorted(out.glob("*/router.env"))]
    found[ENV_NAME] = keep_or_generate(found.get(ENV_NAME, ""), *stored)
    return found


@dataclass
class Rendered:
    """What a render wrote (per host) and what the user should know about it (`notes`: the
    vLLM base image each kit image is built from, once per distinct sentence)."""

    files: dict[str, list[RenderedFile]]
    notes: list[str]


def render(
    inventory: str | Path,
    out: str | Path,
    *,
    profile: str | None = None,
    concurrency: int | None = None,
) -> Rendered:
    """Render every serving host's files under OUT/<host>/."""
    out = Path(out)
    inv = read_inventory(inventory)
    stacks = plan_stack(
        inv,
        profile=load_profile(profile) if profile else None,
        secrets=gather_secrets(out),
        concurrency=concurrency,
    )
    rendered = {host: render_host(stack) for host, stack in stacks.items()}
    for host, files in rendered.items():
        folder = out / host
        folder.mkdir(parents=True, exist_ok=True)
        for file in files:
            write_file(folder / file.path, file.content, file.mode)
    notes = [
        base_note(stack, inv.hostvars[host], Path(inventory)) for host, stack in stacks.items()
    ]
    return Rendered(rendered, list(dict.fromkeys(note for note in notes if note)))


def render_inventory(
    inventory: str | Path,
    out: str | Path,
    *,
    profile: str | None = None,
    concurrency: int | None = None,
) -> dict[str, list[RenderedFile]]:
    """Render every serving host's files under OUT/<host>/ and return what was written."""
    return render(inventory, out, profile=profile, concurrency=concurrency).files


def write_file(path: Path, content: str, mode: int) -> None:
    """Write atomically with the mode set before any byte lands (secrets are never 0644)."""
    write_atomic(path, content, mode=mode)
