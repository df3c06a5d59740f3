"""The I/O edge of rendering: read the inventory, gather secrets, write the files.

Everything is validated and rendered in memory first; only then is anything written, so a
bad inventory or profile leaves an existing output folder untouched.
"""

from __future__ import annotations

import os
import secrets as pysecrets
from pathlib import Path

from sparkops.files import write_atomic
from sparkops.profiles import load_profile
from sparkops.render.inventory import read_inventory
from sparkops.render.stack import plan_stack
from sparkops.render.templates import RenderedFile, render_host

SECRET_NAMES = ("HF_TOKEN", "VLLM_API_KEY", "LITELLM_MASTER_KEY")


def _existing_master_key(out: Path) -> str:
    """Keep the router's key across re-renders (clients already hold it)."""
    for env_file in out.glob("*/router.env"):
        for line in env_file.read_text().splitlines():
            if line.startswith("LITELLM_MASTER_KEY="):
                return line.split("=", 1)[1].strip()
    return ""


def gather_secrets(out: Path) -> dict[str, str]:
    """Secrets from the environment; a router master key is kept or generated (sk- prefix)."""
    found = {name: os.environ[name] for name in SECRET_NAMES if os.environ.get(name)}
    if "LITELLM_MASTER_KEY" not in found:
        found["LITELLM_MASTER_KEY"] = _existing_master_key(out) or (
            "sk-" + pysecrets.token_urlsafe(32)
        )
    return found


def render_inventory(
    inventory: str | Path,
    out: str | Path,
    *,
    profile: str | None = None,
    concurrency: int | None = None,
) -> dict[str, list[RenderedFile]]:
    """Render every serving host's files under OUT/<host>/ and return what was written."""
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
    return rendered


def write_file(path: Path, content: str, mode: int) -> None:
    """Write atomically with the mode set before any byte lands (secrets are never 0644)."""
    write_atomic(path, content, mode=mode)
