"""Read an Ansible inventory directory with ansible-core itself (for `sparkops render`).

ansible-core's InventoryManager parses the directory (hosts.yml and any other inventory
source in it), its VariableManager merges `group_vars/` and `host_vars/` with Ansible's own
precedence, and its Templar resolves `{{ ... }}` (lookups, filters, defaults) exactly as
ansible-playbook does. An earlier hand-written reader covered only what the example
inventories used (one lookup, simple references) and would have drifted from Ansible on real
inventories; the render filter in ansible/plugins/filter sees what this module returns.

What stays here is only what Ansible does not say well for a CLI user: a missing hosts file,
vault-encrypted files (the CLI has no vault password), a YAML error named with its file, and
an unresolvable reference in a variable the renderer reads, each as one line with the fix.
No ansible.cfg or collection is needed: only ansible.builtin plugins are used.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkops.errors import UserError
from sparkops.inputs import parse_yaml, read_text

HOSTS_FILES = ("hosts.yml", "hosts.yaml")
# Variables the renderer reads: one of these that cannot be resolved stops the render. Others
# may use Ansible-only names (e.g. a play's facts) and are kept as written.
RENDERED_PREFIXES = ("vllm_serving_", "litellm_router_", "ray_cluster_", "ansible_host")
VAULT_FIX = (
    "`sparkops render` has no vault password. Pass secrets in the environment (HF_TOKEN, "
    "VLLM_API_KEY, LITELLM_MASTER_KEY) or render with Ansible."
)


@dataclass
class Inventory:
    """Hosts in inventory order, their merged variables and their groups."""

    hosts: list[str] = field(default_factory=list)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)


def _plain(value: Any) -> Any:
    """Ansible's tagged values -> plain Python data (as the render filter does, for pydantic
    and YAML output alike)."""
    return json.loads(json.dumps(value, default=str))


def _vars_files(base: Path) -> list[Path]:
    """The files under group_vars/ and host_vars/ that Ansible's host_group_vars plugin reads
    (YAML or JSON by extension, or no extension)."""
    return sorted(
        path
        for folder in ("group_vars", "host_vars")
        for path in (base / folder).rglob("*")
        if path.is_file()
        and not path.name.startswith(".")
        and path.suffix in (".yml", ".yaml", ".json", "")
    )


class _TagsKept(yaml.SafeLoader):
    """SafeLoader that reads Ansible's own tags (!vault, !unsafe) as plain values: this check
    only looks for syntax errors; Ansible decides what a tag means."""


_TagsKept.add_multi_constructor("!", lambda loader, suffix, node: None)


def _check_files(base: Path, hosts_file: Path) -> None:
    """Refuse vault-encrypted files and name the file and line of a YAML error, before
    Ansible reads them (its own messages name neither the file nor the fix)."""
    for path in [hosts_file, *_vars_files(base)]:
        what = "inventory file"
        text = read_text(path, what=what, fix="fix the file")
        if text.lstrip().startswith("$ANSIBLE_VAULT"):
            raise UserError(f"{path} is vault-encrypted: {VAULT_FIX}")
        data = parse_yaml(text, path, what=what, fix="fix the file", top=None, loader=_TagsKept)
        if path == hosts_file and (not isinstance(data, dict) or not data):
            raise UserError(f"{hosts_file}: expected Ansible's YAML format with an 'all:' group")


def _start_ansible() -> None:
    """What ansible-core's own CLIs do first: install the collection loader, without which
    fully qualified names (`lookup('ansible.builtin.env', ...)`) do not resolve. Once per
    process; inside Ansible (the render filter) it is already done."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()


def _reason(err: Exception) -> str:
    """Ansible's message on one line, without its closing full stop (we add the fix)."""
    return " ".join(str(getattr(err, "message", err)).split()).rstrip(".")


def _resolve(host: str, key: str, value: Any, templar: Any) -> Any:
    """One variable through Ansible's Templar; only the ones rendering reads must resolve."""
    from ansible.errors import AnsibleError

    try:
        return _plain(templar.template(value))
    except AnsibleError as err:
        if key.startswith(RENDERED_PREFIXES):
            reason = _reason(err)
            if "vault" in reason.lower():
                reason = f"{reason}. {VAULT_FIX}"
            raise UserError(
                f"inventory host {host}: {key}: {reason}. "
                "Define what it refers to in the inventory."
            ) from None
        return _plain(value)


def _type_name(found: re.Match[str]) -> str:
    return found.group(1).lower()


def _parse(manager_class: Any, loader: Any, base: Path, hosts_file: Path) -> Any:
    """InventoryManager over the directory, as `ansible-playbook -i DIR` parses it. Ansible
    only warns (a page of it, once per plugin) when it cannot parse hosts.yml and then goes on
    with no hosts: that becomes one line naming the file and the YAML plugin's reason. Other
    warnings are passed on as Ansible wrote them."""
    from ansible.errors import AnsibleError

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            manager = manager_class(loader=loader, sources=[str(base)])
    except AnsibleError as err:
        raise UserError(f"{base}: {_reason(err)}. Fix the inventory.") from None
    warnings = said.getvalue()
    if f"Unable to parse {hosts_file.resolve()} as an inventory source" in warnings:
        found = re.search(r"Failed to parse inventory with 'yaml' plugin: (.+)", warnings)
        reason = found.group(1).rstrip(".") if found else "Ansible could not parse it"
        # "<class 'ansible...._AnsibleTaggedList'>" -> "list": the type the user wrote
        reason = re.sub(r"\"?<class '[\w.]*?(?:_AnsibleTagged)?(\w+)'>\"?", _type_name, reason)
        raise UserError(
            f"{hosts_file}: {reason}. Write it in Ansible's YAML inventory format "
            "(all: -> hosts: / children: mappings)."
        )
    sys.stderr.write(warnings)
    return manager


def find_hosts_file(base: Path) -> Path:
    """The inventory folder's hosts.yml (or hosts.yaml); refused when it has neither."""
    hosts_file = next((base / n for n in HOSTS_FILES if (base / n).is_file()), None)
    if hosts_file is None:
        raise UserError(
            f"no hosts.yml in {base}: point --inventory at an inventory directory "
            "(e.g. inventory/single) that has one."
        )
    return hosts_file


def read_inventory(directory: str | Path) -> Inventory:
    """Parse an inventory directory into hosts and fully merged, resolved variables."""
    base = Path(directory)
    hosts_file = find_hosts_file(base)
    _check_files(base, hosts_file)
    # Imported here: ansible-core's start-up (~0.3 s) is paid only by commands that read an
    # inventory, not by every `sparkops` invocation.
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    _start_ansible()
    loader = DataLoader()
    manager = _parse(InventoryManager, loader, base, hosts_file)
    variables = VariableManager(loader=loader, inventory=manager)
    HostVars(manager, variables, loader)  # `hostvars[...]` in a template, as in a play
    # What Ansible adds to every host without an inventory (groups, hostvars, ...): not
    # inventory variables, so not part of a host's settings.
    magic = set(variables.get_vars())
    hosts = [host.name for host in manager.get_hosts()]
    inv = Inventory(hosts=hosts, groups={k: list(v) for k, v in manager.get_groups_dict().items()})
    for host in manager.get_hosts():
        try:
            merged = variables.get_vars(host=host)
        except AnsibleError as err:
            raise UserError(
                f"inventory host {host.name}: {_reason(err)}. Fix the inventory."
            ) from None
        templar = Templar(loader=loader, variables=merged)
        inv.hostvars[host.name] = {
            key: _resolve(host.name, key, value, templar)
            for key, value in merged.items()
            if key not in magic
        }
    return inv
