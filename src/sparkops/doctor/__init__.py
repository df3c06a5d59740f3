"""Checks of a Spark's fitness for a long job, as pure functions (deepops' doctor is the model).

checks.py: each check a function from gathered facts to Check(name, ok, detail, fix).
preflight.py: turns the task results ansible/playbooks/preflight.yml gathers into those checks.
gpu.py: sparkops-gpu-check, the one GPU power-state check (standard library only, so the
host_tuning role can install it on hosts that have no sparkops package).
"""
