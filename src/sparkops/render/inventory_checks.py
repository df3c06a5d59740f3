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
  and the variable meant (role_vars.misspelt_prefixes).

The subnet arithmetic is Python's ipaddress, not Jinja.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkops.render.role_vars import (
    UNRESOLVED,
    RoleSpecs,
    misspelt_prefixes,
    role_variable_problems,
)
from sparkops.render.settings import DEPRECATED_TOPOLOGIES, TOPOLOGY_OF, topology_named

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


def check_inventory(
    groups: Mapping[str, Iterable[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    specs: RoleSpecs | None,
    plays: Mapping[str, frozenset[str]] | None = None,
) -> Findings:
    """Every rule of the module docstring over the inventory's `sparks` (whatever a
    --limit says: the check is about the inventory, not the hosts a run touches). `specs`
    None (a wheel without the roles) skips the role-variable rules; `plays` is
    role_vars.play_settings' answer, the playbooks' own `sparkops_<play>_` settings."""
    found = Findings()
    sparks = list(dict.fromkeys(groups.get(SPARKS) or []))
    pair = list(dict.fromkeys(groups.get(PAIR) or []))
    if not sparks:
        found.errors.append(
            "The inventory has no hosts in the group 'sparks'. List every Spark under "
            "all.children.sparks.hosts in hosts.yml (copy inventory/single/ or inventory/pair-dp/)"
        )
        return found
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
    return found
