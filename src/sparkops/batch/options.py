"""The job's settings as one schema: `JobConfig`, and the command-line options made from it.

Every setting of a batch job is one field of `JobConfig` (a pydantic model): its type, its
default, its bounds and its help text, written once. `sparkops batch run` and `sparkops bench
sweep` declare their options from those fields (`add_job_options`), so a default, a bound or a
help text cannot drift between the commands, the library entry point and the engine (they
had: `--sample-interval` 5 s in one command and 1 s in the other; the job's defaults were
written three times). A field with a `Flag` is an option; one without (`fsync_interval`,
`recycle_every`, ...) is a library and benchmark setting only.

Bounds are the fields' constraints (`gt`, `ge`, finite numbers), checked by the same
validator on the command line (argparse's `type=`: one message, exit 2, before any request)
and in `JobConfig(...)`: `--request-timeout 0` or `inf` and `--sample-interval nan` are
refused, never silently turned into "off" or an overflow.

The engine gets a view: `EngineSettings` is the base class holding the fields the engine
reads (`JobConfig` inherits them, so their defaults exist once), and `JobConfig.engine()`
returns that frozen sub-model.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin
from urllib.parse import urlsplit

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from sparkops.batch.connections import CONNECT_GAP_S, RECYCLE_EVERY
from sparkops.batch.policy import DEFAULT_POLICY, POLICIES
from sparkops.errors import UserError
from sparkops.openai_http import normalise_base
from sparkops.privacy import has_credentials, redact

# Requests in flight when --concurrency is not given: written once in sparkops.vocabulary
# (doctor/preflight.py's KV-cache verdict assumes the same unless the inventory names another).
from sparkops.vocabulary import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY


@dataclass(frozen=True)
class Flag:
    """A field's command-line option: its flag and how argparse shows it.

    `sweep=False`: `batch run` only (a sweep names its own input, pipeline and output, and
    replaces `--concurrency` by `--levels`). `negate`: a store-true flag that sets the field
    to False (`--no-progress`). `unit`: shown after the default in the help text."""

    flag: str
    metavar: str | None = None
    sweep: bool = True
    negate: bool = False
    required: bool = False
    unit: str = ""


def _flag(field: FieldInfo) -> Flag | None:
    return next((m for m in field.metadata if isinstance(m, Flag)), None)


# The one default the stall rule also reads (batch/stall.py: 4 sample intervals).
SAMPLE_INTERVAL_S = 5.0
# Off a terminal, seconds between two status lines (batch/progress.py reads it too).
STATUS_INTERVAL_S = 30.0

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Interval = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class EngineSettings(BaseModel):
    """The settings the dispatch engine reads (batch/engine.py): a frozen view of the job's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: Annotated[
        int,
        Field(ge=1, description="requests in flight"),
        Flag("--concurrency", metavar="N", sweep=False),
    ] = DEFAULT_CONCURRENCY
    request_timeout: Annotated[
        Seconds,
        Field(description="seconds one request may take before it counts as a timeout (retried)"),
        Flag("--request-timeout", metavar="S", unit="s"),
    ] = 600.0
    retry_for: Annotated[
        Seconds,
        Field(
            description="stop the job (resumable, exit 1) when calls fail and no endpoint has "
            "answered for this many seconds; a call retried this long while others succeed "
            "becomes a record error"
        ),
        Flag("--retry-for", metavar="S", unit="s"),
    ] = 1800.0
    fail_fast: Annotated[
        int,
        Field(
            ge=0,
            description="stop (resumable, exit 1) when the first N records all fail with one "
            "cause (a wrong API key, a field the records lack), without recording them as "
            "finished; 0 turns this off",
        ),
        Flag("--fail-fast", metavar="N"),
    ] = 20
    max_wait: Annotated[
        int | None,
        Field(
            ge=1,
            description="step-aware: a ready call goes next once this many newer calls "
            "became ready (default: the concurrency, at least 64)",
        ),
        Flag("--schedule-max-wait", metavar="N"),
    ] = None
    # Calls admitted beyond the concurrency (None: a quarter of it, at least 8).
    lookahead: Annotated[int | None, Field(ge=1)] = None
    # Requests per kept-alive connection before it is recycled (batch/connections.py; 0: never).
    recycle_every: Annotated[int, Field(ge=0)] = RECYCLE_EVERY
    # Seconds between two new connections (batch/connections.py; 0: no pacing).
    connect_gap: Interval = CONNECT_GAP_S


class JobConfig(EngineSettings):
    """Every setting of one batch job (`sparkops batch run`, `bench sweep`, `run_job`)."""

    input: Annotated[
        Path,
        Field(description="JSONL / CSV records, or an OpenAI batch file"),
        Flag("--input", metavar="FILE", sweep=False, required=True),
    ]
    out: Annotated[
        Path,
        Field(description="job directory (results.jsonl, timeline, report)"),
        Flag("--out", metavar="DIR", sweep=False, required=True),
    ]
    endpoints: Annotated[
        list[str],
        Field(
            min_length=1,
            description="vLLM or LiteLLM base URL (repeatable); put the API key in an "
            "environment variable named by --api-key-env, not in the URL (a user:password "
            "in the URL is redacted from every file and message)",
        ),
        Flag("--endpoint", metavar="URL", required=True),
    ]
    pipeline: Annotated[
        Path | None,
        Field(description="pipeline YAML (not needed for OpenAI batch files)"),
        Flag("--pipeline", metavar="FILE", sweep=False),
    ] = None
    policy: Annotated[
        str,
        Field(
            description="which ready call goes next: fifo (arrival order) or step-aware "
            "(favour the step whose prefix is hottest in the cache, bounded wait)"
        ),
        Flag("--schedule"),
    ] = DEFAULT_POLICY
    api_key_env: Annotated[
        str | None,
        Field(description="environment variable holding the API key (the way to pass a key)"),
        Flag("--api-key-env", metavar="VAR"),
    ] = None
    id_field: Annotated[
        str,
        Field(min_length=1, description="record id field"),
        Flag("--id-field", metavar="NAME"),
    ] = "id"
    restart: Annotated[
        bool,
        Field(description="start over; old files kept in DIR/previous-*/"),
        Flag("--restart"),
    ] = False
    retry_errors: Annotated[
        bool,
        Field(
            description="send the records that ended in error again (after fixing their "
            "cause); their old lines are kept in DIR/previous-*/"
        ),
        Flag("--retry-errors"),
    ] = False
    encoding: Annotated[
        str,
        Field(
            min_length=1,
            description="the input's text encoding (cp1252 for a CSV saved by Excel on "
            "Windows); a byte that is not in it stops the job before any request",
        ),
        Flag("--encoding", metavar="NAME"),
    ] = "utf-8"
    sample_interval: Annotated[
        Seconds,
        Field(description="seconds between /metrics samples"),
        Flag("--sample-interval", metavar="S", unit="s"),
    ] = SAMPLE_INTERVAL_S
    status_interval: Annotated[
        Seconds,
        Field(
            description="off a terminal (journald, a log file): seconds between the status "
            "lines on stderr (done, errors, in flight, records/min, hit rate, ETA)"
        ),
        Flag("--status-interval", metavar="S", unit="s"),
    ] = STATUS_INTERVAL_S
    stall_after: Annotated[
        float | None,
        Field(
            ge=0,
            allow_inf_nan=False,
            description="an endpoint with calls in flight and no progress (no answer, its "
            "/metrics token counters still) for S seconds is stalled: no new calls, its "
            "in-flight calls go to the other endpoints, it is probed again later; with every "
            "endpoint stalled the job stops (resumable, exit 1). Default: the longest of "
            "120 s, 4 sample intervals and 3 times the slowest answer so far; 0 turns this off",
        ),
        Flag("--stall-after", metavar="S"),
    ] = None
    strict_serving: Annotated[
        bool,
        Field(
            description="stop (resumable, exit 1) when an endpoint's vLLM version, model, max "
            "length or cache configuration changes during the job (without it the change is "
            "recorded in DIR/serving.jsonl, shown and reported, and the job goes on)"
        ),
        Flag("--strict-serving"),
    ] = False
    stack_record: Annotated[
        Path | None,
        Field(
            description="the deploy's stack-record.json (next to compose.yml) to keep in the "
            "job's serving record: profile, image, rendered command and environment (no secrets)"
        ),
        Flag("--stack-record", metavar="FILE"),
    ] = None
    metrics_port: Annotated[
        int | None,
        Field(
            ge=1,
            le=65535,
            description="serve the job's own figures as Prometheus metrics on "
            "127.0.0.1:PORT/metrics while it runs (docs/watch.md); a port in use stops the job "
            "before any request",
        ),
        Flag("--metrics-port", metavar="PORT", sweep=False),
    ] = None
    progress: Annotated[
        bool,
        Field(
            description="no live progress display and no status lines (default: a live bar "
            "on a terminal, a status line every --status-interval otherwise)"
        ),
        Flag("--no-progress", negate=True),
    ] = True
    # Seconds between the journal's fsyncs (jobdir/journal.py).
    fsync_interval: Interval = 1.0

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"choose one of {', '.join(sorted(POLICIES))}")
        return value

    @model_validator(mode="after")
    def _no_query(self) -> JobConfig:
        """The kit appends paths (/v1/models, /v1/chat/completions, /metrics) to a base URL:
        a query string (`?api_key=...`) would end up in the middle of each, and every call
        would fail as if the server were wrong. Refused, naming the fix."""
        for url in self.endpoints:
            parts = urlsplit(url)
            if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
                raise ValueError(
                    f"--endpoint {redact(url)} has a query string or fragment ('?' or '#'); the "
                    "kit appends /v1/models, /v1/chat/completions and /metrics to the endpoint, "
                    "so it must be a base URL: give the key with --api-key-env VAR (sent as a "
                    "bearer key, as vLLM's --api-key and LiteLLM expect) and drop the '?...'"
                )
        return self

    @model_validator(mode="after")
    def _distinct_endpoints(self) -> JobConfig:
        """The same server given twice (`--endpoint URL --endpoint URL/`, or `.../v1` beside
        the base) would count as two endpoints: twice the calls sent to one server, a stall
        seen twice, and a report about two servers that are one. Refused, naming it."""
        seen: dict[str, str] = {}
        for url in self.endpoints:
            key = _endpoint_key(url)
            if key is None:
                continue  # not a URL: refused with its own fix before any request (job.py)
            if key in seen:
                raise ValueError(
                    f"--endpoint {redact(url)} is given twice (also as {redact(seen[key])}); "
                    "give each server once (the kit spreads calls over distinct endpoints)"
                )
            seen[key] = url
        return self

    @model_validator(mode="after")
    def _key_env_is_a_name(self) -> JobConfig:
        """--api-key-env takes a variable's name; given the key itself, the key used to come
        back in the error line ("environment variable sk-... is empty or unset"), and so in
        the journal. Refused without echoing the value (before the rule below names it)."""
        if self.api_key_env is not None and not _plausible_env_name(self.api_key_env):
            raise ValueError(
                "--api-key-env takes the NAME of an environment variable that holds the key, "
                "not the key itself (the value given is not shown); export the key in a "
                "variable and pass its name: export SPARKOPS_API_KEY=...; --api-key-env "
                "SPARKOPS_API_KEY"
            )
        return self

    @model_validator(mode="after")
    def _one_authorization(self) -> JobConfig:
        """A URL's user:password is sent as basic auth, --api-key-env as a bearer key: both
        are the request's one Authorization header, so aiohttp refuses every call."""
        url = next((u for u in self.endpoints if has_credentials(u)), None)
        if url is not None and self.api_key_env:
            raise ValueError(
                f"--endpoint {redact(url)} carries credentials and --api-key-env "
                f"{self.api_key_env} sets a key: both would be the Authorization header; "
                "keep the key in --api-key-env and take the user:password out of the URL"
            )
        return self

    def engine(self) -> EngineSettings:
        """The engine's view of this job's settings (the same values, frozen)."""
        return EngineSettings(**{name: getattr(self, name) for name in EngineSettings.model_fields})


def _endpoint_key(url: str) -> str | None:
    """The server `url` names, as a comparable key (scheme and host in lower case, a trailing
    slash and /v1 dropped); None when it is not an http(s) URL."""
    try:
        base = normalise_base(url)
    except UserError:
        return None
    parts = urlsplit(base)
    return parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower()).geturl()


# An environment variable's name as shells write it, and what a key looks like instead:
# a provider's prefix (sk-..., hf_...), or a long run of letters and digits with no '_'.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_PREFIXES = ("sk-", "sk_", "pk_", "rk_", "hf_", "ghp_", "gho_", "github_pat_", "xox", "eyJ")


def _plausible_env_name(value: str) -> bool:
    """Whether `value` can be an environment variable's name rather than a secret."""
    if not _ENV_NAME.fullmatch(value) or value.startswith(_KEY_PREFIXES):
        return False
    random_run = len(value) >= 20 and "_" not in value and any(c.isdigit() for c in value)
    return not random_run


def _bounds(field: FieldInfo) -> str:
    """What a field's constraints allow, in words: 'above 0', '0 or more' (empty: any)."""
    words = []
    for m in field.metadata:
        if isinstance(m, annotated_types.Gt):
            words.append(f"above {m.gt}")
        elif isinstance(m, annotated_types.Ge):
            words.append(f"{m.ge} or more")
    return " and ".join(words)


def _scalar(field: FieldInfo) -> Any:
    """The field's value type without None (int, float, Path, str); str for a list's items."""
    annotation = field.annotation
    if get_origin(annotation) is list:
        return str
    if get_origin(annotation) in (Union, UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    return annotation


def _what(kind: type, field: FieldInfo) -> str:
    noun = {int: "a whole number", float: "a finite number"}.get(kind, "a value")
    bounds = _bounds(field)
    return f"{noun} {bounds}".strip()


@functools.cache
def _parser(name: str) -> Any:
    """argparse `type=`: the text converted and checked against the field's constraints
    (one function per field, shared by every command that declares it)."""
    field = JobConfig.model_fields[name]
    kind = _scalar(field)
    if kind not in (int, float):
        return kind
    constraints = [m for m in field.metadata if not isinstance(m, Flag)]
    check: TypeAdapter[Any] = TypeAdapter(Annotated[(kind, *constraints)])  # type: ignore[arg-type]

    def parse(text: str) -> Any:
        try:
            value = kind(text)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(text)
            return check.validate_python(value)
        except (ValueError, ValidationError):
            raise argparse.ArgumentTypeError(
                f"must be {_what(kind, field)} (got {text!r})"
            ) from None

    parse.__name__ = name  # argparse names the type in its own messages
    return parse


def _help(field: FieldInfo, flag: Flag) -> str:
    text = field.description or ""
    default = field.default
    if "default" in text.lower() or default is None or default is False or field.is_required():
        return text
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    return f"{text} (default: {shown}{' ' + flag.unit if flag.unit else ''})"


def job_fields(command: str) -> dict[str, tuple[FieldInfo, Flag]]:
    """The JobConfig fields `command` ("run" or "sweep") takes as options, by field name:
    what to run first (input, output, pipeline, concurrency), then the schema's order."""
    found = {}
    for name, field in JobConfig.model_fields.items():
        flag = _flag(field)
        if flag is not None and (command == "run" or flag.sweep):
            found[name] = (field, flag)
    return dict(sorted(found.items(), key=lambda item: item[1][1].sweep))


def add_job_options(parser: argparse.ArgumentParser, command: str = "run") -> None:
    """Declare `command`'s job options on `parser`, one per JobConfig field with a Flag."""
    for name, (field, flag) in job_fields(command).items():
        kwargs: dict[str, Any] = {"dest": name, "help": _help(field, flag)}
        if field.annotation is bool:
            kwargs["action"] = "store_false" if flag.negate else "store_true"
            kwargs["default"] = field.default
        elif name == "endpoints":
            kwargs.update(action="append", required=True, metavar=flag.metavar)
        else:
            kwargs.update(type=_parser(name), metavar=flag.metavar)
            kwargs["required"] = flag.required
            if not field.is_required():
                kwargs["default"] = field.default
        if name == "policy":
            kwargs.update(choices=sorted(POLICIES), metavar=None, type=None)
        parser.add_argument(flag.flag, **kwargs)


def job_settings(args: argparse.Namespace, command: str = "run") -> dict[str, Any]:
    """The parsed options of `command` as JobConfig keyword arguments."""
    return {name: getattr(args, name) for name in job_fields(command)}


def job_config(**settings: Any) -> JobConfig:
    """JobConfig from keyword arguments; a value out of bounds is a UserError (exit 2) naming
    the setting and what it allows, never a pydantic traceback."""
    try:
        return JobConfig(**settings)
    except ValidationError as err:
        first = err.errors()[0]
        if not first["loc"]:  # a rule across settings (model_validator): its own sentence
            raise UserError(str(first["msg"]).removeprefix("Value error, ")) from None
        name = str(first["loc"][0])
        field = JobConfig.model_fields.get(name)
        flag = _flag(field) if field is not None else None
        kind = _scalar(field) if field is not None else None
        what = f"must be {_what(kind, field)}" if field and kind in (int, float) else first["msg"]
        raise UserError(
            f"{flag.flag if flag else name} {what} (got {first.get('input')!r}); fix the setting"
        ) from None
