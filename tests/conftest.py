"""Shared pytest fixtures and helpers live in tests/plugins/, one module per concept.

Test modules import helpers from there, never from another test module: `playbook` (the one
ansible-playbook runner), `provision` (provision.yml on a test host), `hosts` (systemd test
hosts, GPU tool stand-ins), `inventories` (example serving inventories), `vllm_server`
and `fault_server` (HTTP servers).
"""

pytest_plugins = [
    "tests.plugins.vllm_server",
    "tests.plugins.hosts",
    "tests.plugins.fault_server",
    "tests.plugins.playbook",
    "tests.plugins.provision",
    "tests.plugins.inventories",
]
