"""The job unit file (sparkops.jobunit.unit): the restart policy from the client's exit
statuses, the wait for serving before it, every argument carried exactly, and the settings
batch.yml cannot put in a unit refused with the variable's name."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from sparkops.jobunit.unit import (
    UnitSpecError,
    exec_line,
    job_of_unit_file,
    parse_spec,
    quote_arg,
    render_notify_unit,
    render_unit,
)

FILTERS = Path(__file__).resolve().parents[2] / "ansible" / "plugins" / "filter"
CMD = "/opt/sparkops/venv/bin/sparkops"


def spec(**over: object) -> dict:
    return {
        "name": "triage",
        "user": "researcher",
        "out": "/home/researcher/out",
        "command": CMD,
        "run_argv": [CMD, "batch", "run", "--out", "/home/researcher/out"],
        "endpoints": ["http://127.0.0.1:8000"],
        "environment": {"DO_NOT_TRACK": "1"},
        "after": ["sparkops-serving.service"],
        **over,
    }


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_the_unit_follows_the_client_s_exit_statuses_and_starts_at_boot() -> None:
    unit = lines(render_unit(parse_spec(spec(systemd_version=252))))
    assert "Restart=on-failure" in unit
    assert "RestartPreventExitStatus=0 2" in unit  # done, configuration: never again
    assert "SuccessExitStatus=3 143" in unit  # record errors, a deliberate stop: not failures
    assert "RestartSec=60" in unit
    assert "StartLimitBurst=6" in unit and "StartLimitIntervalSec=21600" in unit  # 5 restarts
    assert not any(line.startswith("RestartSteps") for line in unit)  # systemd 252 lacks it
    assert "WantedBy=multi-user.target" in unit
    assert "After=network-online.target sparkops-serving.service" in unit
    assert "User=researcher" in unit and "UMask=0077" in unit
    assert 'Environment="DO_NOT_TRACK=1"' in unit
    assert not any(line.startswith(("EnvironmentFile", "OnFailure")) for line in unit)
    assert not any(line.startswith("SupplementaryGroups") for line in unit)
    assert "TimeoutStartSec=3720" in unit  # the wait's bound and a margin
    (pre,) = [line for line in unit if line.startswith("ExecStartPre=")]
    assert pre == (
        f'ExecStartPre={CMD} "batch" "wait-ready" "--within" "3600" '
        '"--endpoint=http://127.0.0.1:8000"'
    )
    (post,) = [line for line in unit if line.startswith("ExecStopPost=")]
    assert post.startswith("ExecStopPost=+/bin/sh -c ") and "0|3) systemctl disable" in post


def test_a_newer_systemd_grows_the_delay_and_a_notification_adds_its_units() -> None:
    parsed = parse_spec(
        spec(systemd_version=255, notify=True, env_file="/etc/sparkops/batch/triage.env",
             api_key_env="SPARKOPS_API_KEY", restart_limit=3, serving_wait_s=0,
             groups=["systemd-journal"])
    )  # fmt: skip
    unit = lines(render_unit(parsed))
    # the host watch reads the GPU driver's errors from the system journal as the job user
    assert "SupplementaryGroups=systemd-journal" in unit
    assert "RestartSteps=3" in unit and "RestartMaxDelaySec=1800" in unit
    assert "StartLimitBurst=4" in unit
    assert "OnFailure=sparkops-batch-triage-notify.service" in unit
    assert "EnvironmentFile=/etc/sparkops/batch/triage.env" in unit
    assert "TimeoutStartSec=infinity" in unit
    assert any('"--api-key-env" "SPARKOPS_API_KEY"' in line for line in unit)
    assert any(
        line.startswith(f'ExecStopPost=-{CMD} "batch" "notify" "/home/researcher/out" "--unit"')
        for line in unit
    )
    notify = lines(render_notify_unit(parsed))
    assert "Type=oneshot" in notify and "User=researcher" in notify
    assert notify[-1].endswith('"--unit" "sparkops-batch-triage.service" "--on-failure"')


def test_every_argument_reaches_the_job_exactly_as_given() -> None:
    assert quote_arg("a b") == '"a b"'
    assert quote_arg('say "hi"') == '"say \\"hi\\""'
    assert quote_arg("100%") == '"100%%"'  # not a specifier
    assert quote_arg("$HOME") == '"$$HOME"'  # not expanded
    assert quote_arg("C:\\x") == '"C:\\\\x"'
    with pytest.raises(UnitSpecError, match="line break"):
        quote_arg("two\nlines")
    with pytest.raises(UnitSpecError, match="not an absolute path"):
        exec_line(["sparkops", "batch"])
    out = "/srv/job 50%"
    text = render_unit(parse_spec(spec(out=out, run_argv=[CMD, "batch", "run", "--out", out])))
    assert '"--out" "/srv/job 50%%"' in text
    assert job_of_unit_file(text) == ("triage", out)  # the raw folder, for `batch status`
    assert job_of_unit_file("[Unit]\nDescription=another unit\n") is None


def test_settings_a_unit_cannot_hold_are_refused_naming_the_variable() -> None:
    with pytest.raises(UnitSpecError, match=r"sparkops_batch_restart_window_s .* never runs out"):
        parse_spec(spec(restart_limit=5, restart_delay_s=600, restart_window_s=3000))
    with pytest.raises(UnitSpecError, match="sparkops_batch_name"):
        parse_spec(spec(name="two words"))
    with pytest.raises(UnitSpecError, match="sparkops_batch_restart_limit"):
        parse_spec(spec(restart_limit=-1))
    with pytest.raises(UnitSpecError, match="sparkops_batch_serving_wait_s"):
        parse_spec(spec(serving_wait_s="an hour"))
    with pytest.raises(UnitSpecError, match="line break"):
        render_unit(parse_spec(spec(out="/srv/a\nExecStart=/bin/evil")))
    with pytest.raises(UnitSpecError, match=r"sparkops_batch_groups\.0"):
        parse_spec(spec(groups=["wheel\nExecStart=/bin/evil"]))
    with pytest.raises(UnitSpecError, match="environment variable name"):
        render_unit(parse_spec(spec(environment={"A=B": "1"})))


def test_the_filter_renders_the_unit_and_names_a_bad_variable() -> None:
    loaded = importlib.util.spec_from_file_location("f", FILTERS / "sparkops_batch_unit.py")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    filters = module.FilterModule().filters()
    assert "ExecStart=" in filters["sparkops_batch_unit"](spec())
    assert "--on-failure" in filters["sparkops_batch_notify_unit"](spec(notify=True))
    with pytest.raises(AnsibleFilterError, match=r"batch\.yml settings: sparkops_batch_restart_"):
        filters["sparkops_batch_unit"](spec(restart_delay_s=0))
