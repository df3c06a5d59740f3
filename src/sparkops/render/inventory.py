"""Read an Ansible YAML inventory directory without Ansible (for `sparkops render`).

Supports what the kit's inventories use: `hosts.yml` (or .yaml) in Ansible's YAML format,
`group_vars/<group>.yml` or `group_vars/<group>/*.yml`, and the same under `host_vars/`.
Precedence follows Ansible: `all` < parent groups < child groups (inline vars below each
group's group_vars files) < inline host vars < host_vars files. Strings holding `{{ ... }}`
are resolved against the host's merged variables with Jinja2, so simple references such as
`"{{ qsfp_network_address }}"` work in both tools. Vault-encrypted files are refused with a
pointer to the fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from sparkops.errors import UserError


@dataclass
class Inventory:
    """Hosts in inventory order, their merged variables and their groups."""

    hosts: list[str] = field(default_factory=list)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)


def _load_yaml(path: Path) -> Any:
    text = path.read_text()
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        raise UserError(
            f"{path} is vault-encrypted: `sparkops render` cannot read it. Pass secrets in the "
            "environment (HF_TOKEN, VLLM_API_KEY, LITELLM_MASTER_KEY) or render with Ansible."
        )
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UserError(f"{path} is not valid YAML ({err}). Fix the file.") from None


def _vars_from(base: Path, name: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for candidate in (base / f"{name}.yml", base / f"{name}.yaml"):
        if candidate.is_file():
            merged.update(_load_yaml(candidate))
    folder = base / name
    if folder.is_dir():
        for file in sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")]):
            merged.update(_load_yaml(file))
    return merged


def _walk(name: str, node: dict, parents: list[str], inv: Inventory, depth: dict) -> None:
    node = node or {}
    depth.setdefault(name, len(parents))
    inv.groups.setdefault(name, [])
    depth.setdefault(f"__vars__{name}", node.get("vars") or {})
    for host, hvars in (node.get("hosts") or {}).items():
        if host not in inv.hostvars:
            inv.hosts.append(host)
            inv.hostvars[host] = {"__groups__": [], "__inline__": {}}
        for group in [*parents, name]:
            if group not in inv.hostvars[host]["__groups__"]:
                inv.hostvars[host]["__groups__"].append(group)
        inv.hostvars[host]["__inline__"].update(hvars or {})
        inv.groups[name].append(host)
    for child, sub in (node.get("children") or {}).items():
        _walk(child, sub, [*parents, name], inv, depth)
        for host in inv.groups[child]:
            if host not in inv.groups[name]:
                inv.groups[name].append(host)


def _lookup(kind: str, name: str, default: str = "") -> str:
    """The one Ansible lookup the kit's inventories use: `lookup('env', NAME)`."""
    if kind not in ("env", "ansible.builtin.env"):
        raise UserError(f"lookup('{kind}') is not supported by `sparkops render`: use 'env'")
    return os.environ.get(name, default)


def _resolve(value: Any, context: dict[str, Any], env: jinja2.Environment) -> Any:
    if isinstance(value, str) and "{{" in value:
        rendered = env.from_string(value).render(context)
        if not rendered.strip():
            return rendered  # an empty lookup is "" in Ansible, not YAML's null
        try:
            parsed = yaml.safe_load(rendered)
        except yaml.YAMLError:
            return rendered
        return parsed if not isinstance(parsed, str) else rendered
    if isinstance(value, dict):
        return {k: _resolve(v, context, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, context, env) for v in value]
    return value


RENDERED_PREFIXES = ("vllm_serving_", "litellm_router_", "ray_cluster_", "ansible_host")


def _resolve_key(host: str, key: str, value: Any, context: dict, env: jinja2.Environment) -> Any:
    """Resolve one variable; only the ones rendering reads must resolve (others may use
    Ansible-only names such as ansible_playbook_python and are left as written)."""
    try:
        return _resolve(value, context, env)
    except (jinja2.UndefinedError, jinja2.TemplateError) as err:
        if key.startswith(RENDERED_PREFIXES):
            raise UserError(
                f"inventory host {host}: {key}: {err}. Define what it refers to in the inventory."
            ) from None
        return value


def read_inventory(directory: str | Path) -> Inventory:
    """Parse an inventory directory into hosts and fully merged, resolved variables."""
    base = Path(directory)
    hosts_file = next((base / n for n in ("hosts.yml", "hosts.yaml") if (base / n).is_file()), None)
    if hosts_file is None:
        raise UserError(
            f"no hosts.yml in {base}: point --inventory at an inventory directory "
            "(e.g. inventory/single) that has one."
        )
    top = _load_yaml(hosts_file)
    if not isinstance(top, dict) or not top:
        raise UserError(f"{hosts_file}: expected Ansible's YAML format with an 'all:' group")
    inv = Inventory()
    depth: dict[str, Any] = {}
    for name, node in top.items():
        _walk(name, node, [] if name == "all" else ["all"], inv, depth)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.globals["lookup"] = _lookup
    for host in inv.hosts:
        raw = inv.hostvars[host]
        groups = sorted(raw["__groups__"], key=lambda g: (g != "all", depth.get(g, 0)))
        merged: dict[str, Any] = {}
        for group in groups:
            merged.update(depth.get(f"__vars__{group}", {}))
            merged.update(_vars_from(base / "group_vars", group))
        merged.update(raw["__inline__"])
        merged.update(_vars_from(base / "host_vars", host))
        merged.setdefault("inventory_hostname", host)
        context = {**merged, "groups": inv.groups}
        for _ in range(5):  # references to references settle within a few passes
            resolved = {k: _resolve_key(host, k, v, context, env) for k, v in merged.items()}
            if resolved == merged:
                break
            merged, context = resolved, {**resolved, "groups": inv.groups}
        merged["group_names"] = [g for g in groups if g != "all"]
        inv.hostvars[host] = merged
    return inv
