"""Ansible filter for preflight.yml: the gathered facts in, the checks' summary out.

    {{ facts | sparkops_preflight(settings) }}
    {{ stack_record_text | sparkops_capacity_warning(concurrency) }}

`facts` holds the raw task results preflight.yml registered on the Spark (see
sparkops.doctor.preflight for the keys), `settings` the sparkops_preflight_* values the
verdicts depend on, without the prefix. It returns {"ok": bool, "checks": [{name, ok, detail,
fix}]}. Every verdict lives in sparkops.doctor.checks, a pure module unit-tested on its own; this
file only adapts it to Ansible (a bad setting becomes an AnsibleFilterError naming the variable).
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
try:
    from sparkops.doctor.preflight import Settings, SettingsError, preflight
    from sparkops.doctor.windows import autostart_script
    from sparkops.vocabulary import capacity, capacity_warning
except ImportError as exc:  # pragma: no cover - depends on the controller's environment
    raise AnsibleFilterError(
        f"sparkops_preflight needs pydantic on the controller ({exc}): run ansible-playbook "
        "from the kit's .venv (make venv) or pip install pydantic"
    ) from exc


def sparkops_preflight(facts, settings) -> dict:
    """Judge the facts preflight.yml gathered (see the module docstring)."""
    if not isinstance(facts, dict) or not isinstance(settings, dict):
        raise AnsibleFilterError("sparkops_preflight: facts and settings must be mappings")
    try:
        return preflight(facts, settings)
    except SettingsError as exc:
        raise AnsibleFilterError(f"preflight settings: {exc}") from exc


def sparkops_capacity_warning(stack_record_text, concurrency=None) -> str:
    """The sentence `sparkops batch` says before a job whose concurrency is above the server's
    --max-num-seqs (sparkops.vocabulary: one rule, both places), for the planned
    concurrency preflight.yml judges ("" none: the preflight's default) and the deploy's stack
    record; "" when it fits, or when the record or its --max-num-seqs is unknown."""
    try:
        stack = json.loads(str(stack_record_text or "") or "null")
    except ValueError:
        return ""
    if concurrency in (None, ""):
        concurrency = Settings.model_fields["concurrency"].default
    try:
        planned = int(concurrency)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(
            f"sparkops_preflight_concurrency must be a whole number, not {concurrency!r}"
        ) from exc
    return capacity_warning(capacity(stack if isinstance(stack, dict) else None, planned, 1)) or ""


def sparkops_wsl_autostart_script(distribution) -> str:
    """The one-time Windows script registering the log-on task that starts WSL2
    (sparkops.doctor.windows.autostart_script); a name that is no distribution's is refused."""
    try:
        return autostart_script(str(distribution))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {
            "sparkops_preflight": sparkops_preflight,
            "sparkops_capacity_warning": sparkops_capacity_warning,
            "sparkops_wsl_autostart_script": sparkops_wsl_autostart_script,
        }
