"""Example serving inventories in a temporary folder: one per topology the templates know.

The render unit tests and the integration tests that run a rendered stack for real (deploy,
Ansible's filter seam, pipeline parallel over Ray) build their inventories here, so an example
topology is spelt once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

# topology -> (host name -> ansible_host, group_vars/all/serving.yml)
TOPOLOGIES = {
    "single": ({"spark-1": "10.0.0.11"}, {"vllm_serving_topology": "single"}),
    "data-parallel": (
        {"spark-1": "10.0.0.11", "spark-2": "10.0.0.12"},
        {
            "vllm_serving_topology": "multi-dp",
            "vllm_serving_bind_address": "{{ ansible_host }}",
        },
    ),
    # Data parallel over any number of Sparks: four here (inventory/quad-dp/).
    "data-parallel-4": (
        {f"spark-{i}": f"10.0.0.1{i}" for i in range(1, 5)},
        {
            "vllm_serving_topology": "multi-dp",
            "vllm_serving_bind_address": "{{ ansible_host }}",
        },
    ),
    "pipeline-ray": (
        {"spark-1": "10.0.0.11", "spark-2": "10.0.0.12"},
        {"vllm_serving_topology": "pair-pp", "ray_cluster_address": "{{ qsfp_address }}"},
    ),
    "pipeline-mp": (
        {"spark-1": "10.0.0.11", "spark-2": "10.0.0.12"},
        {
            "vllm_serving_topology": "pair-pp",
            "ray_cluster_backend": "mp",
            "ray_cluster_address": "{{ qsfp_address }}",
        },
    ),
}


def make_inventory(root: Path, topology: str, **extra_vars) -> Path:
    """Write a hosts.yml + group_vars/all/serving.yml inventory for one example topology."""
    hosts, group_vars = TOPOLOGIES[topology]
    root.mkdir(parents=True, exist_ok=True)
    qsfp = {name: address.replace("10.0.0.", "192.168.177.") for name, address in hosts.items()}
    host_entries = {
        name: {"ansible_host": address, "qsfp_address": qsfp[name]}
        for name, address in hosts.items()
    }
    sparks: dict = {"hosts": host_entries}
    if topology.startswith("pipeline"):  # a pair on one QSFP cable, as the inventory check wants
        for name in host_entries:
            host_entries[name]["qsfp_network_address"] = qsfp[name]
        sparks = {"children": {"spark_pair": {"hosts": host_entries}}}
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sparks": sparks}}}))
    (root / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (root / "group_vars" / "all" / "serving.yml").write_text(
        yaml.safe_dump({**group_vars, **extra_vars})
    )
    return root


def local_serving_inventory(inventory: Path, **serving: object) -> Path:
    """inventory/local/ (this machine, its Docker engine, over a local connection) in
    `inventory`, group_vars/all/serving.yml overridden by `serving`: what benchmarks/soak.py
    and test_deploy_converge.py's local_stack run deploy.yml against."""
    (inventory / "group_vars" / "all").mkdir(parents=True)
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    # deploy.yml checks the inventory first: the topology of inventory/local/.
    hosts = {
        "all": {
            "vars": {"sparkops_topology": "local"},
            "children": {"sparks": {"hosts": {"localhost": host}}},
        }
    }
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    repo = Path(__file__).resolve().parents[2]
    settings = yaml.safe_load(
        (repo / "inventory" / "local" / "group_vars" / "all" / "serving.yml").read_text()
    )
    settings.update(serving)
    (inventory / "group_vars" / "all" / "serving.yml").write_text(yaml.safe_dump(settings))
    return inventory
