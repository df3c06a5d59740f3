"""Render a host's files from the Jinja2 templates in `templates/` (pure: returns text).

This is the only renderer: `sparkops render` writes its output to a folder, and the Ansible
roles call it through the `sparkops_render` filter plugin and copy the same text to the
hosts. Each file carries a "managed" comment header (Ansible's `ansible_managed` there).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from sparkops.plan import load_guard
from sparkops.plan.guard import start_context
from sparkops.render import envfile
from sparkops.render.command import LAUNCHERS
from sparkops.render.record import STACK_RECORD, stack_record_json
from sparkops.render.stack import CONTAINER_HF_CACHE, HostStack

CLI_HEADER = (
    "Rendered by `sparkops render` from templates/: edit the inventory or profile, not this file."
)


def templates_dir() -> Path:
    """The package's own templates/ folder, so an installed wheel renders like the checkout.

    The checkout's top-level `templates/` is a symlink to this folder. SPARKOPS_TEMPLATES
    overrides it (to try edited templates without reinstalling).
    """
    override = os.environ.get("SPARKOPS_TEMPLATES")
    if override:
        return Path(override)
    return Path(str(resources.files("sparkops") / "templates"))


@dataclass(frozen=True)
class RenderedFile:
    """One output file: where it goes in the host's stack folder, its text and mode."""

    path: str
    content: str
    mode: int


# (template, file name in the host's stack folder, mode): every host's files, the router's
# (data parallel, first host) and Ray's start script (pipeline parallel over Ray).
SERVING_FILES = (
    ("serving/compose.yml.j2", "compose.yml", 0o644),
    ("serving/serving.env.j2", "serving.env", 0o600),
    ("serving/sparkops-serving.service.j2", "sparkops-serving.service", 0o644),
    ("serving/memory-guard.sh.j2", "memory-guard.sh", 0o755),
)
ROUTER_FILES = (
    ("router/litellm-config.yaml.j2", "litellm-config.yaml", 0o640),
    ("router/router.env.j2", "router.env", 0o600),
)
RAY_FILES = (("ray/ray-start.sh.j2", "ray-start.sh", 0o755),)
# Every name a render can write: what the inventory check looks for in an inventory folder.
RENDERED_NAMES = frozenset(
    [name for _, name, _ in SERVING_FILES + ROUTER_FILES + RAY_FILES]
    + [STACK_RECORD, "load-guard.py", load_guard.CONFIG]
)


def _comment(text: str) -> str:
    """Same shape as Ansible's `comment` filter (default style)."""
    body = "\n".join(f"# {line}".rstrip() for line in str(text).splitlines())
    return f"#\n{body}\n#"


def _compose_escape(value: str) -> str:
    """Compose interpolates `$`; a literal dollar in a command or env value must be `$$`."""
    return str(value).replace("$", "$$")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["comment"] = _comment
    env.filters["compose_escape"] = _compose_escape
    env.filters["env_value"] = envfile.quote
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env


def _ray_command(stack: HostStack) -> str:
    if stack.role == "head":
        return "/opt/sparkops/ray-start.sh && exec " + shlex.join(stack.vllm["command"])
    return "exec /opt/sparkops/ray-start.sh"


def load_guard_files(settings: dict[str, Any], managed_header: str) -> list[RenderedFile]:
    """The load guard as the host runs it: the module itself (standard library only, run by
    the host's python3), with the managed header under its shebang like every other rendered
    file, and its settings beside it (JSON: no comments)."""
    shebang, rest = Path(load_guard.__file__).read_text(encoding="utf-8").split("\n", 1)
    script = f"{shebang}\n{_comment(managed_header)}\n{rest}"
    text = json.dumps(settings, indent=2, sort_keys=True) + "\n"
    return [
        RenderedFile("load-guard.py", script, 0o755),
        RenderedFile(load_guard.CONFIG, text, 0o644),
    ]


def render_host(stack: HostStack, managed_header: str = CLI_HEADER) -> list[RenderedFile]:
    """Every file one host needs, in the order a deploy writes them."""
    env = _environment()
    guarding = load_guard.rendered_settings(stack)  # None: no guard through the model load
    context = {
        "managed_header": managed_header,
        "stack": stack,
        "v": stack.vllm,
        "r": stack.router,
        "ray": stack.ray,
        "hf_container_cache": CONTAINER_HF_CACHE,
        "entrypoint_len": len(LAUNCHERS[stack.profile.platform]),
        "ray_command": _ray_command(stack) if stack.ray else "",
        "guard": start_context(stack.host_share(), stack.serving),
        "load_guard": guarding,
    }
    plan = list(SERVING_FILES)
    if stack.router:
        plan += ROUTER_FILES
    if stack.ray and stack.ray["backend"] == "ray":
        plan += RAY_FILES
    files = [
        RenderedFile(out, env.get_template(src).render(context), mode) for src, out, mode in plan
    ]
    if guarding is not None:
        files += load_guard_files(guarding, managed_header)
    # what was deployed, for the batch job's serving record (render/record.py; no secrets)
    files.append(RenderedFile(STACK_RECORD, stack_record_json(stack), 0o644))
    return files
