"""Shared pytest fixtures and helpers live in tests/plugins/, one module per concept.

Test modules import helpers from there, never from another test module: `playbook` (the one
ansible-playbook runner), `provision` (provision.yml on a test host), `hosts` (systemd test
hosts, GPU tool stand-ins, the vLLM-CPU runtime image, containers on a private network),
`inventories` (example serving inventories), `job_dir` (a job's manifest), `vllm_server` (real
vLLM-CPU), `fault_server` (a scriptable OpenAI-shaped server), `responder` (an in-process
aiohttp app for a handler a test writes itself), `cli` (`sparkops` as a bounded, quiet
subprocess) and `openai_format` (OpenAI's batch output line, strictly).
"""

# A plugin another one imports comes first: pytest cannot rewrite the asserts of a module that
# is already imported.
pytest_plugins = [
    "tests.plugins.cli",
    "tests.plugins.vllm_server",
    "tests.plugins.hosts",
    "tests.plugins.fault_server",
    "tests.plugins.rewriting_proxy",
    "tests.plugins.playbook",
    "tests.plugins.provision",
    "tests.plugins.inventories",
    "tests.plugins.job_dir",
    "tests.plugins.responder",
    "tests.plugins.openai_format",
    "tests.plugins.schedule",
]
