"""`sparkops batch serve` (OpenAI's Batch API, batch/api/) as a systemd service beside the
serving stack: its unit file, rendered from one validated spec (role sparkops_cli's
sparkops_cli_batch_api_* settings, through the `sparkops_batch_api_unit` filter).

Choices, each for a reason:

- The unit is `sparkops-openai-batch.service`, outside the job units' `sparkops-batch-*` names:
  a job batch.yml could be given any name, so `sparkops-batch-api` could one day be a job's
  unit, and batch.yml's `remove` would delete the server.
- It runs as the job user (never root), with `UMask=0077` and the kit's privacy environment,
  like the jobs: its batches are job folders that user's `sparkops batch status` reads.
- The serving stack's API key reaches it through a root-only `EnvironmentFile` in the jobs'
  key folder (/etc/sparkops/batch, 0700), named by `--api-key-env`: never on the command
  line, in the unit file or in its properties, which every user of the host can read. With
  the key every request to the server must carry it, and its jobs send it to vLLM.
- Where it listens: loopback, or a private address (the private link) only with the key; the
  spec refuses anything else before a file is written, as the server itself would at start.
- `Restart=on-failure` after `restart_delay_s` (10 s), without a start limit: a server's
  failures come from outside (the OOM killer, a crash), and it should come back however often;
  exit 2 (an address, a port taken, the root held by another server: the same start would fail
  the same way) never restarts (`RestartPreventExitStatus=2`). SIGTERM ends it with 0 after it
  stopped its running batch's job resumably: `KillMode=mixed` sends SIGTERM to the server alone,
  so the job is stopped the server's way (the rest of the cgroup is killed only at the stop
  timeout).
- After the serving unit and the network at boot; the server waits for the endpoints itself
  before each job, so it needs no wait of its own.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sparkops.jobunit.unit import UnitSpecError, exec_line, identity_lines

SERVE_UNIT = "sparkops-openai-batch.service"
VARIABLE_PREFIX = "sparkops_cli_batch_api_"
# What the unit sets itself: the same option again in the extra arguments would override it.
OWN_OPTIONS = ("--root", "--host", "--port", "--endpoint", "--api-key-env")
STOP_TIMEOUT_S = 120  # the running job's stop: calls cancelled, journal flushed


class ServeUnit(BaseModel):
    """What the role knows about the batch API (each field a sparkops_cli_batch_api_* variable,
    `address`, `port`, ... ; `command`, `env_file` and the others are the role's own)."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1)
    command: str = Field(min_length=1)  # the installed sparkops
    root: str = Field(min_length=1)  # the server's state folder
    address: str = "127.0.0.1"
    port: int = Field(default=8090, ge=1, le=65535)
    endpoints: list[str] = Field(min_length=1)
    api_key_env: str = ""  # the variable the key file sets ("" none)
    env_file: str = ""
    environment: dict[str, str] = {}
    after: list[str] = []
    args: list[str] = []  # more `batch serve` options (batch run's job options)
    restart_delay_s: Annotated[int, Field(ge=1)] = 10

    @model_validator(mode="after")
    def _sound(self) -> ServeUnit:
        if self.user == "root":
            raise ValueError(
                "sparkops_cli_batch_api_user: the batch API never runs as root; name the job "
                "user (the first of host_tuning_job_users by default)"
            )
        if not self.root.startswith("/"):
            raise ValueError(f"sparkops_cli_batch_api_root: {self.root!r} is not an absolute path")
        if bool(self.api_key_env) != bool(self.env_file):
            raise ValueError("the key's variable and its file go together (a role bug)")
        address_problem(self.address, bool(self.api_key_env))
        taken = [a for a in self.args if a.split("=", 1)[0] in OWN_OPTIONS]
        if taken:
            raise ValueError(
                f"sparkops_cli_batch_api_args: {', '.join(taken)} is set by the role itself; "
                "use sparkops_cli_batch_api_root, _address, _port, _endpoints instead"
            )
        return self


def address_problem(address: str, has_key: bool) -> None:
    """The server's own rule (batch/api/server.py check_address), before a file is written:
    loopback; a private address only with the key; nothing else (ValueError with the fix)."""
    if address == "localhost":
        return
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(
            f"sparkops_cli_batch_api_address: {address!r} is not an IP address; give "
            "127.0.0.1 (the default) or the private link's address"
        ) from None
    if ip.is_loopback:
        return
    if ip.is_unspecified or not ip.is_private:
        raise ValueError(
            f"sparkops_cli_batch_api_address: {address} is reachable from any network; give "
            "127.0.0.1 or the private link's address (reach it from elsewhere through an ssh "
            "tunnel)"
        )
    if not has_key:
        raise ValueError(
            f"sparkops_cli_batch_api_address: {address} can be reached from other machines; "
            "set vllm_serving_api_key (the serving stack's key, which every request must then "
            "carry) or bind the batch API to 127.0.0.1"
        )


def parse_serve_spec(settings: dict) -> ServeUnit:
    """The spec, or UnitSpecError naming the sparkops_cli_batch_api_* variable that is wrong."""
    try:
        return ServeUnit.model_validate(settings)
    except ValidationError as error:
        raise UnitSpecError("; ".join(_problem(item) for item in error.errors())) from error


def _problem(item: Any) -> str:
    where = ".".join(str(p) for p in item["loc"])
    message = str(item["msg"]).removeprefix("Value error, ")
    return f"{VARIABLE_PREFIX}{where}: {message}" if where else message


def serve_argv(spec: ServeUnit) -> list[str]:
    """`sparkops batch serve ...`, whole."""
    argv = [spec.command, "batch", "serve", "--root", spec.root, "--host", spec.address]
    argv += ["--port", str(spec.port), *(f"--endpoint={url}" for url in spec.endpoints)]
    if spec.api_key_env:
        argv += ["--api-key-env", spec.api_key_env]
    return [*argv, *spec.args]


def render_serve_unit(spec: ServeUnit) -> str:
    """The batch API's unit file (see the module docstring for every choice in it)."""
    after = " ".join(["network-online.target", *spec.after])
    unit = [
        "# Written by sparkops (role sparkops_cli, sparkops_cli_batch_api: true); turn it off",
        "# with sparkops_cli_batch_api: false and provision.yml --tags sparkops_cli",
        "[Unit]",
        "Description=sparkops batch serve: OpenAI's Files and Batches API over job folders",
        f"After={after}",
        "Wants=network-online.target",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=exec",
        *identity_lines(spec.user, spec.environment, spec.env_file),
    ]
    unit += [
        f"ExecStart={exec_line(serve_argv(spec))}",
        "Restart=on-failure",
        f"RestartSec={spec.restart_delay_s}",
        "RestartPreventExitStatus=2",
        "KillMode=mixed",
        f"TimeoutStopSec={STOP_TIMEOUT_S}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(unit)
