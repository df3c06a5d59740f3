"""The I/O edge of rendering: read the inventory, gather secrets, write the files.

Everything is validated and rendered in memory first; only then is anything written, so a
bad inventory or profile leaves an existing output folder untouched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sparkops.errors import UserError
from sparkops.files import write_atomic
from sparkops.profiles import load_profile
from sparkops.render.base import base_note
from sparkops.render.inventory import Inventory, read_inventory
from sparkops.render.inventory_checks import check_inventory
from sparkops.render.master_key import ENV_NAME, keep_or_generate
from sparkops.render.role_vars import load_role_specs, play_settings
from sparkops.render.stack import plan_stack
from sparkops.render.templates import RenderedFile, render_host

SECRET_NAMES = ("HF_TOKEN", "VLLM_API_KEY", "LITELLM_MASTER_KEY")
# The checkout's Ansible tree: the roles' argument specs and the playbooks' own settings, what
# the inventory check judges variable names by. A wheel without it skips those two rules.
ANSIBLE_DIR = Path(__file__).resolve().parents[3] / "ansible"


def check(inv: Inventory, ansible_dir: Path = ANSIBLE_DIR) -> list[str]:
    """validate_inventory.yml's check (sparkops.render.inventory_checks) on the inventory
    as read: its errors refuse the render in the playbook's words, its warnings are returned."""
    roles = ansible_dir / "roles"
    specs = load_role_specs(roles) if roles.is_dir() else None
    plays = play_settings(ansible_dir / "playbooks") if specs else {}
    found = check_inventory(inv.groups, inv.hostvars, specs, plays)
    if found.errors:
        raise UserError(". ".join(found.errors) + ".")
    return found.warnings


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
    vLLM base image each kit image is built from, once per distinct sentence; `warnings`: the
    inventory check's, such as a misspelt prefix Ansible would ignore)."""

    files: dict[str, list[RenderedFile]]
    notes: list[str]
    warnings: list[str] = field(default_factory=list)


def render(
    inventory: str | Path,
    out: str | Path,
    *,
    profile: str | None = None,
    concurrency: int | None = None,
) -> Rendered:
    """Render every serving host's files under OUT/<host>/."""
    out = Path(out)
    check_out(out)
    inv = read_inventory(inventory)
    warnings = check(inv)
    stacks = plan_stack(
        inv,
        profile=load_profile(profile) if profile else None,
        secrets=gather_secrets(out),
        concurrency=concurrency,
    )
    rendered = {host: render_host(stack) for host, stack in stacks.items()}
    for host in rendered:
        check_out(out / host)
    try:
        for host, files in rendered.items():
            folder = out / host
            folder.mkdir(parents=True, exist_ok=True)
            for file in files:
                write_file(folder / file.path, file.content, file.mode)
    except OSError as err:
        raise UserError(
            f"--out {out}: cannot write {err.filename or out} ({err.strerror}); name a folder "
            "you can write to"
        ) from None
    notes = [
        base_note(stack, inv.hostvars[host], Path(inventory)) for host, stack in stacks.items()
    ]
    return Rendered(rendered, list(dict.fromkeys(note for note in notes if note)), warnings)


def check_out(folder: Path) -> None:
    """Refuse an output path that is a file (or sits under one) before anything is read or
    written: `--out` names a folder, created when missing."""
    for path in (folder, *folder.parents):
        if path.exists() and not path.is_dir():
            raise UserError(
                f"--out {folder}: {path} is a file, not a folder; name a folder for the "
                "rendered files (it is created when missing)"
            )


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
