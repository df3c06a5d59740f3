"""Ansible filter `sparkops_memory_guard`: the deploy's whole-host memory check.

    {{ host_readings | sparkops_memory_guard(vllm_serving_profile, settings, inventory_hostname) }}

`host_readings` holds what the host printed: meminfo, osrelease, compute_apps, gpu_total,
own_pids (`docker top` output of this stack's containers) and model_config (config.json text,
or ""); `settings` the role's vllm_serving_memory_* values without the prefix. It returns
sparkops.plan.guard's verdict as a dict ({ok, message, largest_kv_bytes, ...}), so the deploy
and `sparkops plan guard` add up the same figures. The logic is unit-tested without Ansible;
this file is the thin seam.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# ansible-playbook from another environment than the kit's venv: use the checkout's sources.
if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from sparkops.errors import UserError
from sparkops.plan.guard import GuardSettings, check_launch, host_facts
from sparkops.profiles import load_profile

# The inventory's vllm_serving_memory_* names, without the prefix: GuardSettings' fields.
SETTINGS = tuple(f.name for f in fields(GuardSettings))
NULLABLE = ("total_gb", "activations_gb")  # None: MemTotal (WSL2: 128 GB); the platform's figure


def _number(value: Any) -> float | None:
    return None if value in (None, "") else float(value)


def _pids(text: Any) -> list[int]:
    return [int(word) for word in str(text or "").split() if word.isdigit()]


def sparkops_memory_guard(
    readings: Mapping[str, Any],
    profile_name: str,
    settings: Mapping[str, Any],
    host: str = "this host",
) -> dict[str, Any]:
    """The guard's verdict for this host (see the module docstring)."""
    try:
        profile = load_profile(str(profile_name))
        defaults = GuardSettings()
        guard = GuardSettings(
            **{
                key: value if value is not None or key in NULLABLE else getattr(defaults, key)
                for key in SETTINGS
                for value in [_number(settings.get(key))]
            }
        )
        facts = host_facts(
            meminfo=str(readings.get("meminfo") or ""),
            osrelease=str(readings.get("osrelease") or ""),
            kind=str(settings.get("host_kind") or "auto"),
            compute_apps=str(readings.get("compute_apps") or ""),
            gpu_total=str(readings.get("gpu_total") or ""),
            own_pids=_pids(readings.get("own_pids")),
        )
        config_text = str(readings.get("model_config") or "")
        config = json.loads(config_text) if config_text.strip() else None
        verdict = check_launch(
            profile,
            facts,
            guard,
            host=str(host),
            hf_config=config if isinstance(config, dict) else None,
            seqs=int(settings["concurrency"]) if settings.get("concurrency") else None,
        )
    except (UserError, ValueError) as err:
        raise AnsibleFilterError(f"memory guard on {host}: {err}") from None
    return verdict.as_dict()


def sparkops_hf_cache_folder(profile_name: str) -> str:
    """The profile's model folder in a Hugging Face cache's hub/ ("models--org--name"), where
    the deploy looks for config.json once the weights have been downloaded."""
    try:
        model = load_profile(str(profile_name)).model
    except UserError as err:
        raise AnsibleFilterError(str(err)) from None
    return "models--" + model.replace("/", "--")


class FilterModule:
    """Registers the filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sparkops_memory_guard": sparkops_memory_guard,
            "sparkops_hf_cache_folder": sparkops_hf_cache_folder,
        }
