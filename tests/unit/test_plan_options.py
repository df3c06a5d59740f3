"""`sparkops plan`'s options are declared from the planners' settings (plan/options.py), as
`sparkops batch run`'s are from JobConfig: each option a field, its default written once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sparkops.plan import cli
from sparkops.plan.options import (
    DecodeSettings,
    MemorySettings,
    PlannerSettings,
    ThroughputSettings,
)

# The least each planner needs to parse.
MINIMAL = {
    ThroughputSettings: [],
    MemorySettings: ["--profile", "gb10-gemma4-12b-fp8"],
    DecodeSettings: ["--profile", "gb10-gemma4-12b-fp8", "--context", "2048"],
}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sparkops")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["plan", *argv])


def options(args: argparse.Namespace, settings: type[PlannerSettings]) -> dict:
    return {name: getattr(args, name) for name in settings.model_fields}


@pytest.mark.parametrize("settings", list(MINIMAL), ids=lambda s: s.command.name)
def test_every_field_is_an_option_with_the_field_s_default(settings):
    args = parse(settings.command.name, *MINIMAL[settings])
    declared = set(vars(args)) - {"command", "plan_command", "func", "json"}
    assert {d for d in declared if not d.startswith("retired_")} == set(settings.model_fields)
    given = dict(zip(MINIMAL[settings][::2], MINIMAL[settings][1::2], strict=True))
    for name, field in settings.model_fields.items():
        if field.is_required() or f"--{name.replace('_', '-')}" in given:
            continue
        assert getattr(args, name) == field.default, name
    assert args.json is False


def test_what_the_options_parse_is_valid_settings():
    """The parsed values have the fields' types: the schema and the parser agree."""
    args = parse(
        "memory", "--config", "m", "--kv-dtype", "bf16", "--memory-gb", "100",
        "--prompt-tokens-per-call", "1600", "--shared", "90%", "--async-scheduling",
    )  # fmt: skip
    settings = MemorySettings.model_validate(options(args, MemorySettings))
    assert settings.config == Path("m") and settings.profile is None
    assert (settings.kv_dtype, settings.memory_gb, settings.prompt_tokens) == ("bf16", 100, 1600)
    assert settings.shared == "90%" and settings.async_scheduling is True
    args = parse("throughput", "--from-report", "r.json", "--for-level", "240", "--points", "3")
    settings = ThroughputSettings.model_validate(options(args, ThroughputSettings))
    assert (settings.from_report, settings.for_level, settings.points) == (Path("r.json"), 240, 3)


def test_one_of_and_required_options_are_refused_as_before(capsys):
    for argv, said in [
        (["memory"], "one of the arguments --config --profile is required"),
        (["decode", "--profile", "p"], "the following arguments are required: --context"),
        (
            ["throughput", "--from-sweep", "s", "--from-report", "r"],
            "argument --from-report: not allowed with argument --from-sweep",
        ),
        (["decode", "--profile", "p", "--context", "1", "--machine", "a100"], "invalid choice"),
        (["memory", "--profile", "p", "--output-tokens", "3"], "use --gen-tokens-per-call"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            parse(*argv)
        assert exit_.value.code == 2
        assert said in capsys.readouterr().err


def test_the_help_lists_each_section_with_its_options(capsys):
    with pytest.raises(SystemExit):
        parse("memory", "--help")
    text = capsys.readouterr().out
    shared, engine = text.index("shared prefixes:"), text.index("engine:")
    assert text.index("--gen-tokens-per-call", shared) < engine < text.index("--block-size", engine)
    assert "--block-size" not in text[shared:engine]
    assert "GB given to vLLM for weights + KV cache (default 0.88 x 128)" in " ".join(text.split())
    assert "--output-tokens" not in text  # retired: refused, not offered
