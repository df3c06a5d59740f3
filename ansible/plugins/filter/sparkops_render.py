"""Ansible filter `sparkops_render`: the deploy roles render through sparkops.render.

    {{ hostvars | sparkops_render(groups, inventory_hostname, ansible_managed) }}

returns {role, health_url, files: [{path, content, mode}], images, client_endpoints} for the
host (role: single, replica, head, worker; files and images empty when the host serves
nothing; images: what the deploy builds or checks before `compose up`, see
sparkops.render.images.required_images; client_endpoints: the --endpoint URLs a batch client
uses, every serving host's, following the inventory). It runs the same validation
(profile rules, bind address, topology) and the same templates as `sparkops render`, so the
CLI and Ansible cannot drift: nothing is written twice.

    {{ litellm_router_master_key | sparkops_master_key(router_env_text) }}

keeps or generates the router's master key with sparkops.render.master_key, as `sparkops
render` does; the litellm_router role stores it as _litellm_router_master_key, which
`sparkops_render` passes on as the LITELLM_MASTER_KEY secret.

    {{ true | sparkops_private_env }}

is sparkops.privacy's environment (telemetry off; hub offline when true) for a process a
playbook starts itself, such as batch.yml's job unit: one list, so a variable added there
reaches the job too.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.addresses import local_base_url
from sparkops.errors import UserError
from sparkops.privacy import private_env
from sparkops.render import envfile, plan_stack, render_host
from sparkops.render.images import required_images
from sparkops.render.inventory import Inventory
from sparkops.render.master_key import ENV_NAME, keep_or_generate
from sparkops.render.settings import ANSIBLE_ONLY, serving_topology
from sparkops.render.stack import client_endpoints

PREFIXES = ("vllm_serving_", "litellm_router_", "ray_cluster_")
PLAIN = ("ansible_host", "sparkops_topology")
# The roles' own facts and results start with _ or __ and never match PREFIXES; any other
# unknown prefixed name is refused as a likely typo (ANSIBLE_ONLY: sparkops.render.settings).
# The master key the litellm_router role kept or generated on the first Spark (set_fact).
KEPT_MASTER_KEY = "_litellm_router_master_key"
# The GB10 base the vllm_serving role pinned for this run ({image, digest}, set_fact in
# tasks/base_image.yml: pulled now, or read from the file beside the inventory). It stands for
# vllm_serving_base_image/_digest, which stay the inventory's: a role sets only _role_x names.
PINNED_BASE = "_vllm_serving_base_pinned"


def _plain(value):
    """Ansible's lazy/tagged values -> plain Python data for pydantic."""
    return json.loads(json.dumps(value, default=str))


def _host_vars(hostvars, host: str) -> dict:
    source = hostvars[host]
    wanted = [
        key
        for key in source
        if (key.startswith(PREFIXES) and key not in ANSIBLE_ONLY) or key in PLAIN
    ]
    values = {key: _plain(source[key]) for key in wanted}
    pinned = _plain(source[PINNED_BASE]) if PINNED_BASE in source else None
    if isinstance(pinned, dict) and pinned.get("digest"):
        values["vllm_serving_base_image"] = pinned["image"]
        values["vllm_serving_base_digest"] = pinned["digest"]
    return values


def _kept_secrets(hostvars, hosts: list[str]) -> dict[str, str]:
    """The router master key the litellm_router role set on a host, as plan_stack's secret."""
    for host in hosts:
        if KEPT_MASTER_KEY in hostvars[host]:
            key = _plain(hostvars[host][KEPT_MASTER_KEY])
            if key:
                return {ENV_NAME: str(key)}
    return {}


def _inventory(hostvars, groups) -> Inventory:
    """The serving hosts' role variables as sparkops.render reads them (the `sparks` group,
    else every host), so both filters plan from the same Inventory."""
    hosts = list(groups.get("sparks") or groups.get("all") or [])
    return Inventory(
        hosts=hosts,
        hostvars={h: _host_vars(hostvars, h) for h in hosts},
        groups={name: list(members) for name, members in groups.items()},
    )


def sparkops_render(hostvars, groups, host, managed_header="Managed by Ansible (sparkops)"):
    """Render `host`'s serving files from every serving host's variables."""
    inventory = _inventory(hostvars, groups)
    try:
        stacks = plan_stack(inventory, secrets=_kept_secrets(hostvars, inventory.hosts))
    except UserError as err:
        raise AnsibleFilterError(str(err)) from None
    endpoints = client_endpoints(inventory, stacks)
    if host not in stacks:
        return {
            "role": "none",
            "health_url": "",
            "files": [],
            "images": [],
            "client_endpoints": endpoints,
        }
    stack = stacks[host]
    serving = stack.serving
    return {
        "role": stack.role,
        "health_url": f"{local_base_url(serving.bind_address, serving.port)}/health",
        "files": [
            {"path": f.path, "content": f.content, "mode": f"{f.mode:04o}"}
            for f in render_host(stack, managed_header)
        ],
        "images": required_images(stack),
        "client_endpoints": endpoints,
    }


def sparkops_client_endpoints(hostvars, groups) -> list[str]:
    """The --endpoint URLs a batch client uses, following the inventory (every data-parallel
    replica, the pipeline head, the single server). Needs no router master key: a job calls
    the replicas directly (batch.yml: `hostvars | sparkops_client_endpoints(groups)`)."""
    inventory = _inventory(hostvars, groups)
    try:
        stacks = plan_stack(inventory, secrets={ENV_NAME: "unused-for-endpoints"})
    except UserError as err:
        raise AnsibleFilterError(str(err)) from None
    return client_endpoints(inventory, stacks)


def sparkops_master_key(given, stored_env="") -> str:
    """The router master key: `given` (litellm_router_master_key), else the one in the host's
    router.env text, else a new one; the same function `sparkops render` uses."""
    return keep_or_generate(str(given or ""), str(stored_env or ""))


def sparkops_env_value(env_text, name) -> str:
    """The value `name` has in an env file's text as compose reads it ("" when absent): the
    rendered serving.env quotes a key holding `$`, quotes or spaces (sparkops.render.envfile)."""
    return envfile.read(str(env_text or "")).get(str(name), "")


def sparkops_private_env(offline=True) -> dict[str, str]:
    """sparkops.privacy.private_env for a process started by a playbook (`offline`: the hub
    switches on, as wherever nothing is to be downloaded)."""
    return private_env(offline=bool(offline))


def sparkops_serving_topology(host_vars) -> str:
    """single | data-parallel | pipeline-parallel for a host's variables (hostvars[host])."""
    return serving_topology(
        {k: host_vars[k] for k in ("vllm_serving_topology", "sparkops_topology") if k in host_vars}
    )


class FilterModule:
    """Registers the filter."""

    def filters(self):
        return {
            "sparkops_render": sparkops_render,
            "sparkops_client_endpoints": sparkops_client_endpoints,
            "sparkops_serving_topology": sparkops_serving_topology,
            "sparkops_master_key": sparkops_master_key,
            "sparkops_env_value": sparkops_env_value,
            "sparkops_private_env": sparkops_private_env,
        }
