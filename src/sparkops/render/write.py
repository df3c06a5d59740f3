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
from sparkops.profiles import Profile, load_profile
from sparkops.render.base import base_note
from sparkops.render.inventory import HOSTS_FILES, Inventory, find_hosts_file, read_inventory
from sparkops.render.inventory_checks import (
    RENDER_ELSEWHERE,
    check_inventory,
    inventory_folder_problems,
)
from sparkops.render.master_key import ENV_NAME, keep_or_generate
from sparkops.render.role_vars import load_role_specs, play_settings
from sparkops.render.stack import plan_stack
from sparkops.render.templates import RenderedFile, render_host

SECRET_NAMES = ("HF_TOKEN", "VLLM_API_KEY", "LITELLM_MASTER_KEY")
# The checkout's Ansible tree: the roles' argument specs and the playbooks' own settings, what
# the inventory check judges variable names by. A wheel without it skips those two rules.
ANSIBLE_DIR = Path(__file__).resolve().parents[3] / "ansible"


def check(
    inv: Inventory, ansible_dir: Path = ANSIBLE_DIR, profile: Profile | None = None
) -> list[str]:
    """validate_inventory.yml's check (sparkops.render.inventory_checks) on the inventory
    as read (with `profile`, --profile's, in place of the inventory's): its errors refuse the
    render in the playbook's words, its warnings are returned."""
    roles = ansible_dir / "roles"
    specs = load_role_specs(roles) if roles.is_dir() else None
    plays = play_settings(ansible_dir / "playbooks") if specs else {}
    found = check_inventory(inv.groups, inv.hostvars, specs, plays, profile)
    refuse(found.errors)
    return found.warnings


def refuse(errors: list[str]) -> None:
    """The check's errors as one UserError, in the playbook's words."""
    if errors:
        raise UserError(". ".join(errors) + ".")


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
    check_concurrency(concurrency)
    check_out(out)
    find_hosts_file(Path(inventory))
    check_out_of_inventory(out, Path(inventory))
    # Before ansible-core parses the folder: parsing runs its executable files.
    refuse(inventory_folder_problems(inventory))
    chosen = load_profile(profile) if profile else None
    inv = read_inventory(inventory)
    warnings = check(inv, profile=chosen)
    stacks = plan_stack(
        inv,
        profile=chosen,
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


def _looks_like_inventory(folder: Path) -> bool:
    return (
        any((folder / name).is_file() for name in HOSTS_FILES) or (folder / "group_vars").is_dir()
    )


def check_out_of_inventory(out: Path, inventory: Path) -> None:
    """Refuse an output folder in the inventory folder (or in any folder that looks like an
    Ansible inventory: hosts.yml, group_vars/), before anything is written: the next playbook
    run would read every rendered file as an inventory source and run memory-guard.sh as an
    inventory script on the controller, and serving.env's secrets would sit in the folder
    the docs say to commit."""
    inventory_at = inventory.resolve()
    for folder in (out.resolve(), *out.resolve().parents):
        if folder == inventory_at:
            where = f"the inventory folder {inventory}"
        elif _looks_like_inventory(folder):
            where = f"{folder}, which looks like an Ansible inventory (hosts.yml or group_vars/)"
        else:
            continue
        raise UserError(
            f"--out {out} is inside {where}: the next playbook run would read the rendered "
            "files as inventory sources and run memory-guard.sh as an inventory script on this "
            f"machine, and serving.env's secrets would sit in the inventory; {RENDER_ELSEWHERE}"
        )


def check_concurrency(concurrency: int | None) -> None:
    """Refuse a --concurrency below 1: a job keeps at least one request in flight (0 would
    silently fall back to the inventory's, a negative one passed every check)."""
    if concurrency is not None and concurrency < 1:
        raise UserError(
            f"--concurrency {concurrency}: the job's requests in flight must be a whole number "
            "of at least 1 (e.g. --concurrency 64, at most the profile's vllm.max_num_seqs); "
            "leave it out to use the inventory's vllm_serving_concurrency"
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
