"""Ansible filters for batch.yml: a job's systemd unit files, rendered by sparkops.jobunit.

    {{ spec | sparkops_batch_unit }}          the job's unit (sparkops-batch-NAME.service)
    {{ spec | sparkops_batch_notify_unit }}   its OnFailure= unit (with a notification URL)
    {{ spec | sparkops_batch_api_unit }}      `sparkops batch serve` as a service (role
                                              sparkops_cli, sparkops_cli_batch_api: true)

`spec` holds batch.yml's settings without the sparkops_batch_ prefix (sparkops.jobunit.unit
JobUnit), or the role's batch API settings (sparkops.jobunit.serve_unit ServeUnit); a wrong
one becomes an AnsibleFilterError naming its variable. Every byte of the
files, and every choice in them (restart policy, the wait for serving), is Python's.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

if importlib.util.find_spec("sparkops") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))
try:
    from sparkops.jobunit.serve_unit import parse_serve_spec, render_serve_unit
    from sparkops.jobunit.unit import (
        UnitSpecError,
        parse_spec,
        render_notify_unit,
        render_unit,
    )
except ImportError as exc:  # pragma: no cover - depends on the controller's environment
    raise AnsibleFilterError(
        f"sparkops_batch_unit needs pydantic on the controller ({exc}): run ansible-playbook "
        "from the kit's .venv (make venv) or pip install pydantic"
    ) from exc


def _plain(value):
    """Plain dicts, lists and strings: ansible-core 2.19 hands nested values over lazily, and
    pydantic reads a lazy list's items without resolving them."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _spec(spec):
    if not isinstance(spec, Mapping):
        raise AnsibleFilterError("sparkops_batch_unit: the spec must be a mapping")
    try:
        return parse_spec(_plain(spec))
    except UnitSpecError as exc:
        raise AnsibleFilterError(f"batch.yml settings: {exc}") from exc


def sparkops_batch_unit(spec) -> str:
    """The job's unit file."""
    try:
        return render_unit(_spec(spec))
    except UnitSpecError as exc:
        raise AnsibleFilterError(f"batch.yml settings: {exc}") from exc


def sparkops_batch_notify_unit(spec) -> str:
    """The job's OnFailure= unit file."""
    try:
        return render_notify_unit(_spec(spec))
    except UnitSpecError as exc:
        raise AnsibleFilterError(f"batch.yml settings: {exc}") from exc


def sparkops_batch_api_unit(spec) -> str:
    """The batch API's unit file (sparkops-openai-batch.service)."""
    if not isinstance(spec, Mapping):
        raise AnsibleFilterError("sparkops_batch_api_unit: the spec must be a mapping")
    try:
        return render_serve_unit(parse_serve_spec(_plain(spec)))
    except UnitSpecError as exc:
        raise AnsibleFilterError(f"sparkops_cli batch API settings: {exc}") from exc


class FilterModule:
    def filters(self):
        return {
            "sparkops_batch_unit": sparkops_batch_unit,
            "sparkops_batch_notify_unit": sparkops_batch_notify_unit,
            "sparkops_batch_api_unit": sparkops_batch_api_unit,
        }
