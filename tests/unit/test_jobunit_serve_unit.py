"""`sparkops batch serve` as a systemd service (sparkops.jobunit.serve_unit, role sparkops_cli's
sparkops_cli_batch_api): the unit file, where it may listen, what it refuses, and the unit the
role really renders from its own settings (a real ansible-playbook run of the role's spec
through the `sparkops_batch_api_unit` filter)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from sparkops.batch.api.server import check_address
from sparkops.errors import UserError
from sparkops.jobunit.serve_unit import (
    SERVE_UNIT,
    UnitSpecError,
    parse_serve_spec,
    render_serve_unit,
)
from sparkops.jobunit.unit import UNIT_PREFIX
from sparkops.privacy import private_env
from tests.plugins.playbook import PLAYBOOKS, REPO, run_playbook

ROLE = REPO / "ansible" / "roles" / "sparkops_cli"
FILTERS = REPO / "ansible" / "plugins" / "filter"
CMD = "/opt/sparkops/venv/bin/sparkops"
KEY_FILE = "/etc/sparkops/batch/batch-api.key"
SECRET = "sk-batch-api-never-shown"


def spec(**over: object) -> dict:
    return {
        "user": "researcher",
        "command": CMD,
        "root": "/var/lib/sparkops-batch-api",
        "endpoints": ["http://127.0.0.1:8000"],
        "environment": {"DO_NOT_TRACK": "1"},
        "after": ["sparkops-serving.service"],
        **over,
    }


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_the_unit_serves_on_loopback_as_the_job_user_and_restarts_on_failure() -> None:
    unit = lines(render_serve_unit(parse_serve_spec(spec())))
    (start,) = [line for line in unit if line.startswith("ExecStart=")]
    assert start == (
        f'ExecStart={CMD} "batch" "serve" "--root" "/var/lib/sparkops-batch-api" "--host" '
        '"127.0.0.1" "--port" "8090" "--endpoint=http://127.0.0.1:8000"'
    )
    assert "User=researcher" in unit and "UMask=0077" in unit and "Type=exec" in unit
    assert 'Environment="DO_NOT_TRACK=1"' in unit
    assert "Restart=on-failure" in unit and "RestartSec=10" in unit
    assert "RestartPreventExitStatus=2" in unit  # an address, a port taken: the same again
    assert "StartLimitIntervalSec=0" in unit  # a server comes back however often it fails
    assert "KillMode=mixed" in unit  # SIGTERM to the server, which stops its job its way
    assert "After=network-online.target sparkops-serving.service" in unit
    assert "WantedBy=multi-user.target" in unit
    assert not any(line.startswith("EnvironmentFile") for line in unit)  # no key: none


def test_behind_the_key_the_unit_names_the_root_only_file_never_the_key() -> None:
    with_key = spec(
        address="10.10.0.1",
        api_key_env="SPARKOPS_API_KEY",
        env_file=KEY_FILE,
        args=["--concurrency", "128"],
    )
    text = render_serve_unit(parse_serve_spec(with_key))
    unit = lines(text)
    assert f"EnvironmentFile={KEY_FILE}" in unit
    (start,) = [line for line in unit if line.startswith("ExecStart=")]
    assert start.endswith('"--api-key-env" "SPARKOPS_API_KEY" "--concurrency" "128"')
    assert '"--host" "10.10.0.1"' in start
    # the spec has no place for the key itself: a key handed to it is refused, not written
    with pytest.raises(UnitSpecError, match="sparkops_cli_batch_api_api_key"):
        parse_serve_spec({**with_key, "api_key": SECRET})


@pytest.mark.parametrize(
    ("address", "has_key"),
    [
        ("127.0.0.1", False),
        ("localhost", False),
        ("::1", False),
        ("10.10.0.1", True),
        ("192.168.100.2", True),
        ("10.10.0.1", False),
        ("0.0.0.0", True),
        ("::", True),
        ("8.8.8.8", True),
        ("spark-1.lan", True),
    ],
)
def test_where_it_may_listen_is_the_server_s_own_rule(address: str, has_key: bool) -> None:
    """Refused before a file is written exactly where `batch serve` would refuse at start
    (exit 2, which the unit never restarts), and the other way round."""
    try:
        check_address(address, has_key)
        server_says = None
    except UserError as err:
        server_says = str(err)
    extra = {"api_key_env": "SPARKOPS_API_KEY", "env_file": KEY_FILE} if has_key else {}
    try:
        parse_serve_spec(spec(address=address, **extra))
        unit_says = None
    except UnitSpecError as err:
        unit_says = str(err)
    assert (server_says is None) == (unit_says is None), (server_says, unit_says)
    if unit_says:
        assert unit_says.startswith("sparkops_cli_batch_api_address: ")
        assert "127.0.0.1" in unit_says or "vllm_serving_api_key" in unit_says  # the fix


def test_settings_the_unit_cannot_hold_are_refused_naming_the_variable() -> None:
    with pytest.raises(UnitSpecError, match="sparkops_cli_batch_api_user: the batch API never"):
        parse_serve_spec(spec(user="root"))
    with pytest.raises(UnitSpecError, match="sparkops_cli_batch_api_root: 'batches' is not an"):
        parse_serve_spec(spec(root="batches"))
    with pytest.raises(UnitSpecError, match="sparkops_cli_batch_api_port"):
        parse_serve_spec(spec(port=70000))
    with pytest.raises(UnitSpecError, match="sparkops_cli_batch_api_endpoints"):
        parse_serve_spec(spec(endpoints=[]))
    with pytest.raises(UnitSpecError, match=r"--port=9000, --root is set by the role itself"):
        parse_serve_spec(spec(args=["--port=9000", "--root", "/elsewhere"]))
    with pytest.raises(UnitSpecError, match="line break"):
        render_serve_unit(parse_serve_spec(spec(root="/srv/a\nExecStartPre=/bin/evil")))


def test_its_unit_is_no_job_s_unit() -> None:
    """batch.yml names a job's unit sparkops-batch-NAME and removes it by that name: the batch
    API's unit must never be one of those names."""
    assert not SERVE_UNIT.startswith(UNIT_PREFIX)
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["_sparkops_cli_batch_api_unit"] == SERVE_UNIT
    assert SERVE_UNIT in (PLAYBOOKS / "status.yml").read_text()
    # the jobs' key files are NAME.env in the same folder: this one cannot be a job's
    assert not role_vars["_sparkops_cli_batch_api_key_file"].endswith(".env")


def test_the_filter_renders_the_unit_and_names_a_bad_variable() -> None:
    loaded = importlib.util.spec_from_file_location("f", FILTERS / "sparkops_batch_unit.py")
    assert loaded and loaded.loader
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    render = module.FilterModule().filters()["sparkops_batch_api_unit"]
    assert "ExecStart=" in render(spec())
    with pytest.raises(AnsibleFilterError, match="batch API settings: sparkops_cli_batch_api_ad"):
        render(spec(address="0.0.0.0"))


# Two inventories: the stack's key set and the batch API on the private link; no key, loopback.
CASES = {
    "with-key": {
        "sparkops_cli_batch_api": True,
        "sparkops_cli_batch_api_address": "10.10.0.1",
        "sparkops_cli_batch_api_args": ["--concurrency", "128"],
        "host_tuning_job_users": ["researcher"],
        "vllm_serving_api_key": SECRET,
    },
    "no-key": {
        "sparkops_cli_batch_api": True,
        "sparkops_cli_batch_api_user": "analyst",
        "sparkops_cli_batch_api_endpoints": ["http://10.10.0.1:8000", "http://10.10.0.2:8000"],
    },
}


@pytest.fixture(scope="module")
def role_units(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The unit the role installs for each case: its defaults and vars/main.yml's spec, the
    inventory's settings on top (task vars here), rendered by one real ansible-playbook run
    through the role's filter."""
    tmp_path = tmp_path_factory.mktemp("role-unit")
    role_vars = {
        **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
        **yaml.safe_load((ROLE / "vars" / "main.yml").read_text()),
        # what the sparkops_defaults role gives the play
        "sparkops_defaults_vllm_url": "http://127.0.0.1:8000",
        "sparkops_defaults_serving_unit": "sparkops-serving.service",
    }
    tasks = [
        {
            "name": f"Write the unit the role would install ({case})",
            "ansible.builtin.copy": {
                "content": "{{ _sparkops_cli_batch_api_spec | sparkops_batch_api_unit }}",
                "dest": str(tmp_path / f"{case}.service"),
                "mode": "0600",
            },
            "vars": inventory,
        }
        for case, inventory in CASES.items()
    ]
    play = {"name": "Render", "hosts": "localhost", "connection": "local",
            "gather_facts": False, "vars": role_vars, "tasks": tasks}  # fmt: skip
    (tmp_path / "filter_plugins").symlink_to(PLAYBOOKS / "filter_plugins")
    (tmp_path / "render.yml").write_text(yaml.safe_dump([play]), encoding="utf-8")
    done = run_playbook(
        tmp_path / "render.yml",
        "localhost,",
        extra_vars={"ansible_python_interpreter": sys.executable},
        timeout=120,
    )
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert SECRET not in done.stdout + done.stderr
    return {case: (tmp_path / f"{case}.service").read_text(encoding="utf-8") for case in CASES}


def test_the_role_renders_the_unit_behind_the_stack_s_key(role_units: dict[str, str]) -> None:
    text = role_units["with-key"]
    unit = lines(text)
    assert SECRET not in text  # the key stays in the root-only file
    assert f"EnvironmentFile={KEY_FILE}" in unit and "User=researcher" in unit
    (start,) = [line for line in unit if line.startswith("ExecStart=")]
    assert start == (
        f'ExecStart={CMD} "batch" "serve" "--root" "/var/lib/sparkops-batch-api" "--host" '
        '"10.10.0.1" "--port" "8090" "--endpoint=http://127.0.0.1:8000" "--api-key-env" '
        '"SPARKOPS_API_KEY" "--concurrency" "128"'
    )
    shown = [line for line in unit if line.startswith("Environment=")]
    assert shown == [f'Environment="{key}={value}"' for key, value in private_env().items()]
    assert "After=network-online.target sparkops-serving.service" in unit


def test_without_a_key_the_role_s_unit_has_no_key_file(role_units: dict[str, str]) -> None:
    unit = lines(role_units["no-key"])
    assert "User=analyst" in unit
    assert not any(line.startswith("EnvironmentFile") for line in unit)
    (start,) = [line for line in unit if line.startswith("ExecStart=")]
    assert "--api-key-env" not in start and '"--host" "127.0.0.1"' in start
    assert '"--endpoint=http://10.10.0.1:8000" "--endpoint=http://10.10.0.2:8000"' in start
