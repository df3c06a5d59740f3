"""The inventory check: one set of rules and sentences for `sparkops render` and the playbooks.

ansible/playbooks/validate_inventory.yml (which every entry playbook imports first) calls
`check_inventory` through the filter in ansible/plugins/filter/sparkops_inventory.py, and
`sparkops render` calls it before it renders anything, so an inventory the playbooks refuse
cannot render, and both say the same words. Only inventory variables are read: no facts, no
connection. The rules:

- every Spark is in the group `sparks`;
- a role-prefixed variable is declared by its role, with a value of its type (role_vars);
- one topology word, known, the same on every host (vllm_serving_topology overrides
  sparkops_topology, as the deploy does);
- a one-host topology has one host and no pair; a pair exactly two hosts in `spark_pair`,
  no WSL2 laptop among them, each with a QSFP IPv4 address, two addresses in one subnet;
  multi-dp two or more hosts and no pair;
- a name one slip from a role's (or a playbook's) prefix is warned about, naming the owner
  and the variable meant (role_vars.misspelt_prefixes);
- every Spark is its own machine: no two share an `ansible_host` (and port) other than
  loopback (the kit's stand-ins for several Sparks on one machine);
- `ansible_connection: local` runs every task on the controller, so a host that has it names
  no address but loopback (a desktop's address with it left in provisioned the controller);
- the model's weights (a host's share of them, pipeline parallel) fit the machine's memory
  (vllm_serving_memory_total_gb, else a GB10's 128 GB): no KV cache setting rescues that;
- an inventory folder (a folder among the `-i` sources) holds no executable file and no
  rendered stack (`inventory_folder_problems`): Ansible reads every file in it as an
  inventory source and runs an executable one as a dynamic inventory script on the
  controller. The one rule that reads files; `sparkops render` runs it before ansible-core
  parses the folder, a playbook (whose Ansible has parsed it) stops at it.

The subnet arithmetic is Python's ipaddress, not Jinja.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparkops.errors import UserError
from sparkops.plan.guard import GB10_TOTAL_GB
from sparkops.profiles import Profile, load_profile
from sparkops.profiles.checks import pipeline_stages
from sparkops.render.role_vars import (
    UNRESOLVED,
    RoleSpecs,
    misspelt_prefixes,
    role_variable_problems,
)
from sparkops.render.settings import (
    DEPRECATED_TOPOLOGIES,
    TOPOLOGY_OF,
    ServingVars,
    topology_named,
)
from sparkops.render.templates import RENDERED_NAMES
from sparkops.units import GB, GIB

PAIR_TOPOLOGIES = ("pair-dp", "pair-pp")
MULTI_TOPOLOGIES = ("multi-dp",)
DEFAULT_QSFP_PREFIX = 24
SPARKS = "sparks"
PAIR = "spark_pair"


@dataclass
class Findings:
    """What the check found: `errors` stop the run before any host is touched; `warnings`
    (a probably misspelt name Ansible would ignore) are printed and the run goes on."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _value(host_vars: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """A variable as plain data; UNRESOLVED when it needs what is not known before a play
    (a fact) or, as text, still holds a template."""
    try:
        if name not in host_vars:
            return default
        value = host_vars[name]
    except Exception:  # Ansible's lazy templating failed: judge the name, not the value
        return UNRESOLVED
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return UNRESOLVED
    return value


def _role_vars(host_vars: Mapping[str, Any], specs: RoleSpecs) -> dict[str, Any]:
    return {
        str(name): _value(host_vars, str(name)) for name in host_vars if specs.role_of(str(name))
    }


def _topology(host_vars: Mapping[str, Any]) -> tuple[str, str]:
    """(variable, word) naming the host's topology, as the deploy reads it: single when
    neither variable is set (the shape rules then judge the hosts against one host)."""
    plain = {
        name: value
        for name in ("vllm_serving_topology", "sparkops_topology")
        if (value := _value(host_vars, name)) not in (None, "", UNRESOLVED)
    }
    return topology_named(plain)


def _topology_problem(host: str, variable: str, word: str) -> str | None:
    if word in TOPOLOGY_OF or (
        variable == "vllm_serving_topology" and word in DEPRECATED_TOPOLOGIES
    ):
        return None
    close = difflib.get_close_matches(word.replace("_", "-").lower(), TOPOLOGY_OF, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    shown = f"'{word}'"
    where = "topology.yml" if variable == "sparkops_topology" else "serving.yml"
    return (
        f"Host {host}: {variable} is {shown}, which is not a topology{hint}. Set it to one of "
        f"{', '.join(TOPOLOGY_OF)} in group_vars/all/{where}"
    )


def qsfp_address_problem(host: str, host_vars: Mapping[str, Any]) -> str | None:
    """Why a pair host's QSFP address or prefix cannot be used (None when it can)."""
    address = _value(host_vars, "qsfp_network_address", "")
    prefix = _value(host_vars, "qsfp_network_prefix", DEFAULT_QSFP_PREFIX)
    try:
        ipaddress.IPv4Address(str(address))
        good_prefix = 8 <= int(prefix) <= 30
    except (ValueError, TypeError):
        good_prefix = False
    if good_prefix:
        return None
    return (
        f"Host {host}: qsfp_network_address is '{address or '(unset)'}' with prefix {prefix}; a "
        "pair host needs its IPv4 address on the QSFP link, e.g. 192.168.100.10 on one Spark and "
        "192.168.100.11 on the other (prefix in qsfp_network_prefix, 8 to 30, default 24). Set "
        "it under the host in hosts.yml"
    )


def qsfp_subnet_problem(pair: list[str], hostvars: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Two valid QSFP addresses that clash or sit in different subnets (None when they are
    two addresses of one subnet with the same prefix)."""
    interfaces = [
        ipaddress.IPv4Interface(
            f"{_value(hostvars[h], 'qsfp_network_address')}/"
            f"{int(_value(hostvars[h], 'qsfp_network_prefix', DEFAULT_QSFP_PREFIX))}"
        )
        for h in pair
    ]
    addresses = {i.ip for i in interfaces}
    networks = {i.network for i in interfaces}
    if len(addresses) == len(pair) and len(networks) == 1:
        return None
    shown = " and ".join(str(i.ip) for i in interfaces)
    nets = " and ".join(str(n) for n in dict.fromkeys(i.network for i in interfaces))
    return (
        f"Hosts {' and '.join(pair)} have QSFP addresses {shown} (subnet {nets}): they must be "
        "two different addresses in one subnet with the same qsfp_network_prefix (e.g. "
        "192.168.100.10 and 192.168.100.11 with prefix 24). Fix qsfp_network_address in hosts.yml"
    )


def _shape_problems(
    topology: str, sparks: list[str], pair: list[str]
) -> list[str]:  # the hosts the topology needs
    problems = []
    if topology not in PAIR_TOPOLOGIES + MULTI_TOPOLOGIES and (len(sparks) != 1 or pair):
        problems.append(
            f"Topology '{topology}' runs on one host, but the inventory lists {len(sparks)} in "
            f"'sparks' ({', '.join(sparks)}) and {len(pair)} in 'spark_pair'. Keep one host and "
            "no spark_pair group, or use topology pair-dp / pair-pp for two Sparks (multi-dp "
            "for data parallel over two or more)"
        )
    if topology in PAIR_TOPOLOGIES and (len(pair) != 2 or set(pair) - set(sparks)):
        problems.append(
            f"Topology '{topology}' needs exactly two hosts in the group 'spark_pair', found "
            f"{len(pair)} ({', '.join(pair) if pair else 'none'}). Put both Sparks, and only "
            "them, under spark_pair in hosts.yml"
        )
    if topology in MULTI_TOPOLOGIES and (len(sparks) < 2 or pair):
        problems.append(
            f"Topology '{topology}' serves one model from every host in 'sparks' and needs at "
            f"least two, found {len(sparks)} ({', '.join(sparks)}), with {len(pair)} in "
            "'spark_pair'. List two or more Sparks under sparks and no spark_pair group (two "
            "Sparks joined by one QSFP cable: use pair-dp)"
        )
    return problems


def _pair_problems(
    topology: str, pair: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    problems = [
        f"Host {host} is a WSL2 laptop (spark_preflight_host_kind: wsl2) and cannot be part of "
        "a pair: WSL2 has no QSFP/RoCE link. Remove it from spark_pair and give it its own "
        "inventory with topology wsl2 (see inventory/wsl2/)"
        for host in pair
        if _value(hostvars[host], "spark_preflight_host_kind", "auto") == "wsl2"
    ]
    if topology not in PAIR_TOPOLOGIES:
        return problems
    addresses = [p for host in pair if (p := qsfp_address_problem(host, hostvars[host]))]
    problems += addresses
    if len(pair) == 2 and not addresses:
        subnet = qsfp_subnet_problem(pair, hostvars)
        problems += [subnet] if subnet else []
    return problems


RENDER_ELSEWHERE = "render outside it (e.g. sparkops render --out /tmp/stack)"


def _inventory_entries(folder: Path) -> Iterator[tuple[Path, bool]]:
    """Every file under `folder` in name order, with whether Ansible reads it as an
    inventory source: ansible-core's own IGNORED pattern (dot names, group_vars, host_vars,
    backup extensions) decides, as InventoryManager.parse_source walks the folder. Dot
    folders (.git) are not entered at all."""
    from ansible.inventory.manager import IGNORED

    for top, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        parts = Path(top).relative_to(folder).parts
        read_folder = not any(IGNORED.search(os.fsencode(part)) for part in parts)
        for name in sorted(files):
            yield Path(top) / name, read_folder and not IGNORED.search(os.fsencode(name))


def _rendered_stack_problem(folder: Path, where: Path, names: list[str]) -> str:
    return (
        f"{where} holds files `sparkops render` writes ({', '.join(names)}), inside the "
        f"inventory folder {folder}: Ansible reads each as an inventory source, runs an "
        "executable one (memory-guard.sh) as an inventory script on this machine, and "
        "serving.env holds secrets in the folder you commit. Remove them from the inventory "
        f"and {RENDER_ELSEWHERE}"
    )


def _executable_problem(folder: Path, path: Path) -> str:
    return (
        f"{path} is executable, inside the inventory folder {folder}: Ansible runs every "
        "executable file in an inventory folder as a dynamic inventory script, on this machine, "
        "each time it reads the inventory. Move it out of the inventory folder, or clear its "
        f"executable bit (chmod -x {path}) if it is inventory data"
    )


def inventory_folder_problems(folder: str | Path) -> list[str]:
    """Files in an inventory folder that Ansible must not read: a rendered serving stack (one
    sentence per folder holding one) and any other file ansible-core's script plugin would
    run. Read before ansible-core parses the folder (parsing is what runs them)."""
    from ansible.plugins.inventory.script import InventoryModule

    folder = Path(folder)
    if not folder.is_dir():
        return []
    script = InventoryModule()
    rendered: dict[Path, list[str]] = {}
    executables = []
    for path, read in _inventory_entries(folder):
        if path.name in RENDERED_NAMES:
            rendered.setdefault(path.parent, []).append(path.name)
        elif read and script.verify_file(str(path)):
            executables.append(_executable_problem(folder, path))
    stacks = [_rendered_stack_problem(folder, where, names) for where, names in rendered.items()]
    return stacks + executables


def _said_and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + f" and {items[-1]}" if len(items) > 1 else items[0]


def _same_machine_problems(
    sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Two Sparks whose `ansible_host` (the inventory name where none is set) and SSH port are
    the same are one machine: the deploy would put two stacks on it and count it twice. A
    loopback address is this machine on purpose (the kit's stand-ins for several Sparks on
    one machine, their ports apart), not a copied address."""
    machines: dict[tuple[str, str], list[str]] = {}
    for host in sparks:
        address = _value(hostvars[host], "ansible_host", host)
        port = _value(hostvars[host], "ansible_port", 22)
        if address in (None, "", UNRESOLVED) or port is UNRESOLVED or _is_loopback(str(address)):
            continue
        machines.setdefault((str(address).lower(), str(port)), []).append(host)
    return [
        f"Hosts {_said_and(hosts)} have the same ansible_host {address}: they are one machine, "
        "so the deploy would put a serving stack on it for each and count it as more Sparks "
        "than there are. Give each Spark its own address (ansible_host) in hosts.yml, or list "
        "the machine once"
        for (address, _), hosts in machines.items()
        if len(hosts) > 1
    ]


def _is_loopback(address: str) -> bool:
    if address.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _local_connection_problems(
    sparks: list[str], hostvars: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """`ansible_connection: local` with another machine's address: Ansible never uses the
    address, so every task (provisioning included) runs on the controller itself."""
    problems = []
    for host in sparks:
        connection = _value(hostvars[host], "ansible_connection")
        address = _value(hostvars[host], "ansible_host")
        if connection not in ("local", "ansible.builtin.local") or not isinstance(address, str):
            continue
        if address and not _is_loopback(address):
            problems.append(
                f"Host {host} has ansible_connection: local and ansible_host {address}: with a "
                "local connection Ansible never goes to that address, every task runs on this "
                f"machine instead. Remove ansible_connection: local to reach {address} over "
                "SSH, or remove ansible_host to run on this machine"
            )
    return problems


@lru_cache(maxsize=16)
def _profile_named(name: str) -> Profile | None:
    """The profile an inventory names, or None where it cannot be loaded: the render and the
    deploy refuse that themselves, in their words."""
    try:
        return load_profile(name)
    except UserError:
        return None


def _machine_gb(host_vars: Mapping[str, Any], profile: Profile) -> float | None:
    """The machine's whole memory in decimal GB: vllm_serving_memory_total_gb, else a GB10's
    (None: a CPU host of unknown size)."""
    given = _value(host_vars, "vllm_serving_memory_total_gb")
    try:
        total = float(given) if given not in (None, "", UNRESOLVED) else None
    except (TypeError, ValueError):
        return None  # the role-variable rule names a value that is not a number
    if total is None and profile.platform == "gb10":
        return GB10_TOTAL_GB
    return total if total and total > 0 else None


def _weights_problem(
    host: str, host_vars: Mapping[str, Any], profile: Profile, topology: str
) -> str | None:
    """Weights (a host's share of them under pipeline parallelism) larger than the whole
    machine: no KV cache or GPU budget setting makes that load."""
    total_gb = _machine_gb(host_vars, profile)
    stages = pipeline_stages(profile, 2 if topology == "pair-pp" else 1)
    share_gib = profile.weights_gib / stages
    if total_gb is None or share_gib * GIB <= total_gb * GB:
        return None
    held = f"{share_gib:.1f} GiB of weights per host (1/{stages} of {profile.weights_gib:.1f})"
    if stages == 1:
        held = f"{profile.weights_gib:.1f} GiB of weights"
    split = (
        ", or split it over two Sparks (sparkops_topology: pair-pp, each Spark holds half)"
        if stages == 1 and profile.weights_gib / 2 * GIB <= total_gb * GB
        else ""
    )
    return (
        f"Host {host}: profile {profile.name} has {held}, more than the machine's "
        f"{total_gb:g} GB ({total_gb * GB / GIB:.1f} GiB) of memory in all, before any KV "
        f"cache: it cannot load. Choose a smaller or quantised profile{split}"
    )


def _weights_problems(
    topology: str,
    sparks: list[str],
    hostvars: Mapping[str, Mapping[str, Any]],
    profile: Profile | None,
) -> list[str]:
    """_weights_problem for every Spark, with `profile` (render's --profile) or the one each
    host's vllm_serving_profile names."""
    default = ServingVars.model_fields["profile"].default
    problems = []
    for host in sparks:
        named = _value(hostvars[host], "vllm_serving_profile", default)
        used = profile or (_profile_named(str(named)) if named is not UNRESOLVED else None)
        if used is not None and (problem := _weights_problem(host, hostvars[host], used, topology)):
            problems.append(problem)
    return problems


def check_inventory(
    groups: Mapping[str, Iterable[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    specs: RoleSpecs | None,
    plays: Mapping[str, frozenset[str]] | None = None,
    profile: Profile | None = None,
    sources: Iterable[str | Path] = (),
) -> Findings:
    """Every rule of the module docstring over the inventory's `sparks` (whatever a
    --limit says: the check is about the inventory, not the hosts a run touches). `specs`
    None (a wheel without the roles) skips the role-variable rules; `plays` is
    role_vars.play_settings' answer, the playbooks' own `sparkops_<play>_` settings;
    `profile` the one a render serves in place of the inventory's (--profile); `sources` the
    inventory sources (`-i`): the folders among them are read for files Ansible must not
    read (a file source is read alone, whatever sits beside it)."""
    found = Findings()
    sparks = list(dict.fromkeys(groups.get(SPARKS) or []))
    pair = list(dict.fromkeys(groups.get(PAIR) or []))
    if not sparks:
        found.errors.append(
            "The inventory has no hosts in the group 'sparks'. List every Spark under "
            "all.children.sparks.hosts in hosts.yml (copy inventory/single/ or inventory/pair-dp/)"
        )
        return found
    found.errors += [
        problem
        for source in dict.fromkeys(str(source) for source in sources)
        for problem in inventory_folder_problems(source)
    ]
    found.errors += _local_connection_problems(sparks, hostvars)
    found.errors += _same_machine_problems(sparks, hostvars)
    if specs is not None:
        for host in sparks:
            problems = role_variable_problems(_role_vars(hostvars[host], specs), specs)
            if problems:
                found.errors.append(f"Host {host}: {'; '.join(problems)}")
        names = {str(name) for host in sparks for name in hostvars[host]}
        found.warnings += misspelt_prefixes(names, specs, plays or {})
    words = {host: _topology(hostvars[host]) for host in sparks}
    # Once per distinct word (group_vars give every host the same), naming its first host.
    first_with = {named: host for host, named in reversed(list(words.items()))}
    unknown = [p for named, host in first_with.items() if (p := _topology_problem(host, *named))]
    if unknown:
        found.errors += unknown
        return found
    first = sparks[0]
    topology = words[first][1]
    differing = [
        f"Host {host}: {variable} is '{word}' but {first} has '{topology}'. Set it once, for all "
        "hosts, in group_vars/all/topology.yml"
        for host, (variable, word) in words.items()
        if word != topology
    ]
    if differing:
        found.errors += differing
        return found
    # vllm_serving_topology's deprecated words, as the shape they now name
    if topology == "data-parallel":
        topology = "pair-dp" if pair else "multi-dp"
    topology = "pair-pp" if topology == "pipeline-parallel" else topology
    found.errors += _shape_problems(topology, sparks, pair)
    found.errors += _pair_problems(topology, pair, hostvars)
    found.errors += _weights_problems(topology, sparks, hostvars, profile)
    return found
