"""A batch job's systemd unit file, rendered from one validated spec (batch.yml's settings).

Why a unit file per job rather than `systemd-run` (what batch.yml did before issue 39): a
transient unit is gone after a reboot, so a power cycle ended a day-long job for good. An
installed, enabled unit (WantedBy multi-user.target, ordered after the serving unit) is started
again at every boot; the client's resume (exactly once, from its journal) does the rest.

The restart policy follows the client's exit statuses (`sparkops batch run --help`):

- 0 (every record done) and 3 (finished, some records are errors) are successes: never
  restarted, and the unit disables itself (ExecStopPost), so the next boot does not start a
  finished job again. 3 is resumed only by asking: `--retry-errors`.
- 2 (usage or configuration) is never restarted (RestartPreventExitStatus): the same command
  would fail the same way.
- 1 (stopped part-way: no endpoint answered, every endpoint stalled, disk full) and a kill by
  a signal (the kernel's OOM killer) restart after RestartSec, with a growing delay where
  systemd has RestartSteps (254 and later), at most `restart_limit` times within
  `restart_window_s` (StartLimitBurst/StartLimitIntervalSec); then the unit stays failed and
  `batch status` says the restart budget is spent.
- 143 (SIGTERM: `systemctl stop`, a shutdown) is a deliberate stop: not restarted, the unit
  left inactive rather than failed; an enabled unit starts again at the next boot.

Before the client, ExecStartPre runs `sparkops batch wait-ready`: the client's own start-up
check refuses an endpoint it cannot reach with exit 2 (a configuration error, right for a
mistyped --endpoint, wrong after a boot while vLLM loads for minutes), so the unit waits for a
real chat completion first, bounded by `serving_wait_s`; a wait that runs out fails the start,
which the restart policy counts like an exit 1.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "sparkops-batch-"
# The keys that tie a unit file to its job: systemd ignores [Unit] keys starting with X-.
JOB_NAME_KEY = "X-Sparkops-Job-Name"
JOB_DIR_KEY = "X-Sparkops-Job-Dir"
# The client's exit statuses the policy names (sparkops.batch.cli EXIT_STATUSES).
EXIT_DONE, EXIT_STOPPED, EXIT_CONFIG, EXIT_RECORD_ERRORS, EXIT_SIGTERM = 0, 1, 2, 3, 143
# RestartSteps= and RestartMaxDelaySec= came with systemd 254 (Debian 12 has 252, Ubuntu
# 24.04 and DGX OS 7 have 255): older ones restart after a fixed RestartSec.
RESTART_STEPS_SINCE = 254
# Added to the wait's own bound before systemd gives up on a start that hangs.
START_MARGIN_S = 120
NAME = re.compile(r"^[A-Za-z0-9_-]+$")
Seconds = Annotated[int, Field(ge=1)]


class UnitSpecError(ValueError):
    """A setting batch.yml cannot put in a unit; the message names its variable and the fix."""


class JobUnit(BaseModel):
    """What batch.yml knows about one job (each field a sparkops_batch_* variable)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME.pattern)
    user: str = Field(min_length=1)
    out: str = Field(min_length=1)
    command: str = Field(min_length=1)  # the installed sparkops
    run_argv: list[str] = Field(min_length=1)  # `sparkops batch run ...`, whole
    endpoints: list[str] = Field(min_length=1)
    api_key_env: str = ""  # the variable the env file sets ("" none)
    env_file: str = ""
    environment: dict[str, str] = {}
    # Supplementary groups of the job user, e.g. systemd-journal: the host watch reads the
    # GPU driver's errors from the system journal (batch.yml adds it where the host has it).
    groups: list[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]*$")]] = []
    after: list[str] = []
    restart_delay_s: Seconds = 60
    restart_max_delay_s: Seconds = 1800
    restart_limit: int = Field(default=5, ge=0)
    restart_window_s: Seconds = 21600
    serving_wait_s: int = Field(default=3600, ge=0)  # 0: wait as long as it takes
    systemd_version: int = 0
    notify: bool = False

    @model_validator(mode="after")
    def _budget_can_run_out(self) -> JobUnit:
        """A window shorter than the restarts' own delays would forget each restart before
        the next one: the count would never run out (a crash loop at a slow pace)."""
        delays = self.restart_limit * self.longest_delay_s
        if self.restart_limit and self.restart_window_s <= delays:
            raise ValueError(
                f"sparkops_batch_restart_window_s ({self.restart_window_s}) must be longer than "
                f"sparkops_batch_restart_limit x the longest restart delay ({delays} s), else "
                "the restart count never runs out; raise the window or lower the limit"
            )
        return self

    @property
    def unit(self) -> str:
        return f"{UNIT_PREFIX}{self.name}.service"

    @property
    def notify_unit(self) -> str:
        return f"{UNIT_PREFIX}{self.name}-notify.service"

    @property
    def stepped(self) -> bool:
        """Whether this systemd grows the delay between restarts (RestartSteps)."""
        return self.systemd_version >= RESTART_STEPS_SINCE and self.restart_limit > 0

    @property
    def longest_delay_s(self) -> int:
        return (
            max(self.restart_delay_s, self.restart_max_delay_s)
            if self.stepped
            else (self.restart_delay_s)
        )


def parse_spec(settings: dict) -> JobUnit:
    """The spec, or UnitSpecError naming the sparkops_batch_* variable that is wrong."""
    try:
        return JobUnit.model_validate(settings)
    except ValidationError as error:
        problems = "; ".join(_problem(item) for item in error.errors())
        raise UnitSpecError(problems) from error


def _problem(item: Any) -> str:
    where = ".".join(str(p) for p in item["loc"])
    message = str(item["msg"]).removeprefix("Value error, ")
    return f"sparkops_batch_{where}: {message}" if where else message


def quote_arg(arg: str) -> str:
    """One argument of an Exec= line, exactly as given: double-quoted, with systemd's C-style
    escapes for backslash and quote, `%%` for a literal % (specifiers) and `$$` for a literal $
    (environment expansion). A line break cannot be carried: refused."""
    if "\n" in arg or "\r" in arg:
        raise UnitSpecError(f"an argument holds a line break ({arg[:40]!r}...): remove it")
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def exec_line(argv: list[str], prefix: str = "") -> str:
    """An Exec= value: the program's absolute path first, then every argument quoted.

    `prefix` is systemd's ("-": a failure is ignored; "+": runs with full privileges)."""
    program, *args = argv
    if not program.startswith("/"):
        raise UnitSpecError(f"{program!r} is not an absolute path: give the installed sparkops")
    quote_arg(program)  # refuses a line break
    return " ".join([prefix + program.replace("%", "%%"), *(quote_arg(a) for a in args)])


def environment_line(key: str, value: str) -> str:
    """An Environment= line carrying `value` exactly (a name that is not one is refused)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise UnitSpecError(f"{key!r} is not an environment variable name")
    return "Environment=" + quote_arg(f"{key}={value}").replace("$$", "$")


def identity_lines(
    user: str, environment: dict[str, str], env_file: str, groups: list[str] | None = None
) -> list[str]:
    """Who a kit unit runs as and with what environment: the job user (never root, checked by
    its spec) with its supplementary groups, private files (UMask), the kit's environment and
    the root-only key file."""
    lines = [f"User={user}", "UMask=0077"]
    lines += [f"SupplementaryGroups={' '.join(groups)}"] if groups else []
    lines += [environment_line(k, v) for k, v in environment.items()]
    return lines + ([f"EnvironmentFile={env_file}"] if env_file else [])


def wait_argv(spec: JobUnit) -> list[str]:
    """`sparkops batch wait-ready`: every endpoint answers a chat completion, bounded."""
    argv = [spec.command, "batch", "wait-ready", "--within", str(spec.serving_wait_s)]
    argv += [f"--endpoint={url}" for url in spec.endpoints]
    if spec.api_key_env:
        argv += ["--api-key-env", spec.api_key_env]
    return argv


def notify_argv(spec: JobUnit, on_failure: bool = False) -> list[str]:
    """`sparkops batch notify DIR --unit UNIT`: the URL comes from the root-only env file."""
    argv = [spec.command, "batch", "notify", spec.out, "--unit", spec.unit]
    return [*argv, "--on-failure"] if on_failure else argv


def _restart_lines(spec: JobUnit) -> list[str]:
    lines = [
        "Restart=on-failure",
        f"RestartSec={spec.restart_delay_s}",
        f"RestartPreventExitStatus={EXIT_DONE} {EXIT_CONFIG}",
        f"SuccessExitStatus={EXIT_RECORD_ERRORS} {EXIT_SIGTERM}",
    ]
    if spec.stepped:
        lines += [
            f"RestartSteps={spec.restart_limit}",
            f"RestartMaxDelaySec={spec.restart_max_delay_s}",
        ]
    return lines


def render_unit(spec: JobUnit) -> str:
    """The job's unit file (see the module docstring for every choice in it)."""
    after = " ".join(["network-online.target", *spec.after])
    timeout = "infinity" if spec.serving_wait_s == 0 else str(spec.serving_wait_s + START_MARGIN_S)
    unit = [
        f"# Written by sparkops batch.yml for the job {spec.name}; remove it with",
        f"# batch.yml -e sparkops_batch_name={spec.name} -e sparkops_batch_action=remove",
        "[Unit]",
        f"Description=sparkops batch job {spec.name}",
        f"After={after}",
        "Wants=network-online.target",
        # restart_limit restarts after the first start, within the window
        f"StartLimitIntervalSec={spec.restart_window_s}",
        f"StartLimitBurst={spec.restart_limit + 1}",
    ]
    if spec.notify:
        unit.append(f"OnFailure={spec.notify_unit}")
    quote_arg(spec.out)  # refuses a line break before it reaches the file
    unit += [f"{JOB_NAME_KEY}={spec.name}", f"{JOB_DIR_KEY}={spec.out}", "", "[Service]"]
    unit += ["Type=exec", *identity_lines(spec.user, spec.environment, spec.env_file, spec.groups)]
    unit += [
        f"ExecStartPre={exec_line(wait_argv(spec))}",
        f"ExecStart={exec_line(spec.run_argv)}",
        # A finished job (0, 3) is not started again at the next boot; the file stays for
        # `batch status`. --no-reload: the symlink goes, no reload from inside the unit.
        'ExecStopPost=+/bin/sh -c \'case "$$EXIT_STATUS" in 0|3) '
        f"systemctl disable --no-reload {spec.unit} ;; esac'",
    ]
    if spec.notify:
        unit.append(f"ExecStopPost={exec_line(notify_argv(spec), prefix='-')}")
    unit += _restart_lines(spec)
    unit += [f"TimeoutStartSec={timeout}", "", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(unit)


def render_notify_unit(spec: JobUnit) -> str:
    """The job's OnFailure= unit: a word when the restart budget is spent (the unit entered
    its failed state; an exit 2 was already said by the job's own ExecStopPost)."""
    unit = [
        f"# Written by sparkops batch.yml for the job {spec.name}: its notification on failure",
        "[Unit]",
        f"Description=sparkops batch job {spec.name}: notify on failure",
        "",
        "[Service]",
        "Type=oneshot",
        *identity_lines(spec.user, spec.environment, spec.env_file),
    ]
    unit += [f"ExecStart={exec_line(notify_argv(spec, on_failure=True), prefix='-')}", ""]
    return "\n".join(unit)


def job_of_unit_file(text: str) -> tuple[str, str] | None:
    """(name, job folder) of a unit file batch.yml wrote; None for any other file."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in (JOB_NAME_KEY, JOB_DIR_KEY):
            found[key.strip()] = value.strip()
    if JOB_NAME_KEY in found and JOB_DIR_KEY in found:
        return found[JOB_NAME_KEY], found[JOB_DIR_KEY]
    return None
