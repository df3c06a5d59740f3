"""Shared pytest fixtures live in tests/plugins/, one module per real component."""

pytest_plugins = [
    "tests.plugins.vllm_server",
    "tests.plugins.hosts",
    "tests.plugins.fault_server",
]
