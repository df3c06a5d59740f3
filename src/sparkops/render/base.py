"""Which vLLM base image a render's kit image (sparkops/vllm:gb10) is built FROM: what
`sparkops render` tells the user, so a first deploy's pull is no surprise.

The deploy (ansible/roles/vllm_serving/tasks/base_image.yml) builds FROM the base by digest:
the inventory's vllm_serving_base_digest, else the one an earlier deploy pinned in the lock
file beside the inventory (vllm_serving_base_lock, default <inventory>/.sparkops-base-image.yml),
else it pulls the base tag on the Spark once and pins what it got. The render reads the same
sources and says which applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkops.errors import UserError
from sparkops.inputs import read_yaml
from sparkops.render.images import required_images
from sparkops.render.stack import HostStack

LOCK_FILE = ".sparkops-base-image.yml"


def _locked(path: Path) -> dict[str, Any]:
    """The lock file's {image, digest}; {} when there is none or it cannot be read (the
    deploy then resolves the base again and rewrites it)."""
    try:
        return read_yaml(path, what="base image lock", fix="the deploy rewrites it")
    except UserError:
        return {}


def base_note(stack: HostStack, hostvars: dict[str, Any], inventory_dir: Path) -> str | None:
    """One sentence on the base image this host's kit image is built from (None: the stack
    runs an image the kit does not build), and whose choice it is when the profile's."""
    note = _base_sentence(stack, hostvars, inventory_dir)
    if note and not hostvars.get("vllm_serving_base_image") and stack.profile.base_image:
        note += f". The {stack.profile.name} profile names this base"
    return note


def _base_sentence(stack: HostStack, hostvars: dict[str, Any], inventory_dir: Path) -> str | None:
    build = required_images(stack)[0]["build"]
    if not build or build["context"] != "vllm":
        return None
    base, digest = build["args"]["VLLM_BASE"], build["args"]["VLLM_DIGEST"]
    if digest:
        return f"vLLM base image: {base}@{digest} (vllm_serving_base_digest in the inventory)"
    lock = Path(str(hostvars.get("vllm_serving_base_lock") or inventory_dir / LOCK_FILE))
    pinned = _locked(lock)
    moving = str(hostvars.get("vllm_serving_update_base", "")).lower() in ("true", "1", "yes")
    if pinned.get("image") == base and pinned.get("digest"):
        if moving:
            return (
                f"vLLM base image: {base}, pinned at {pinned['digest']} in {lock}; "
                "vllm_serving_update_base is set, so the deploy pulls the tag again and moves "
                "the pin to what it points to now (it shows old -> new)"
            )
        return (
            f"vLLM base image: {base}@{pinned['digest']} (pinned by an earlier deploy in {lock}; "
            "-e vllm_serving_update_base=true moves it to what the tag points to now)"
        )
    return (
        f"vLLM base image: {base}, no digest pinned yet: the deploy pulls it on the Spark once "
        f"and pins the digest it gets in {lock} (or set vllm_serving_base_digest)"
    )
