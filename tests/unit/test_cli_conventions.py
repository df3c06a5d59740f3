"""What a user expects of any CLI: --version, defaults in --help, JSON output, quiet pipes,
and `batch run` / `bench sweep` taking their shared options from one declaration."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sparkops
from sparkops import cli
from sparkops.batch.engine import EngineConfig
from sparkops.batch.job import JobConfig
from sparkops.batch.options import EngineSettings, job_config, job_fields, job_settings
from sparkops.errors import UserError
from sparkops.jobdir.folder import prepare_dir
from tests.plugins.job_dir import manifest

SPARKOPS = [sys.executable, "-m", "sparkops.cli"]
# What only `batch run` has: a sweep runs its own input per level and replaces
# --concurrency by --levels.
# (--metrics-port: one port per job; a sweep runs its levels one after another, unwatched)
BATCH_ONLY = {"--help", "--pipeline", "--input", "--out", "--concurrency", "--metrics-port"}


def subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = action.choices[name]
    return parser


def every_parser(parser: argparse.ArgumentParser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from every_parser(sub, (*path, name))


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.option_strings[-1]: a for a in parser._actions if a.option_strings}


def small_job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    prepare_dir(job, manifest(total=2), restart=False)
    (job / "results.jsonl").write_text(
        "".join(
            json.dumps({"id": f"r{i}", "status": "done", "final": "yes", "steps": [], "t": i})
            + "\n"
            for i in range(2)
        )
    )
    return job


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"sparkops {sparkops.__version__}"


def test_a_command_loads_only_its_family_and_the_table_is_what_the_families_register():
    top = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    registered = {}
    for module in cli.COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        registered.update(dict.fromkeys(sub.choices, module))
    assert registered == cli.COMMANDS and set(top.choices) == set(cli.COMMANDS)
    # in a fresh interpreter: `sparkops render ...` parses without the other families
    probe = (
        "import sys; from sparkops import cli; "
        "cli.build_parser(['render', '--help-all']); "
        "print(sorted(m for m in sys.modules if m.endswith('.cli') and m.startswith('sparkops.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "['sparkops.cli', 'sparkops.render.cli']"


def test_every_help_shows_every_default():
    """Each option with a default says it in its --help, in every sub-command."""
    missing = []
    for path, parser in every_parser(cli.build_parser()):
        text = " ".join(parser.format_help().split())
        for flag, action in options(parser).items():
            default = action.default
            if default in (None, False, [], argparse.SUPPRESS) or flag in ("-h", "--version"):
                continue
            shown = " ".join(str(action.help or "").split())
            if "default" not in text[text.index(flag) :].lower() or (
                "default" not in shown.lower() and f"(default: {default})" not in text
            ):
                missing.append(f"sparkops {' '.join(path)} {flag} (default {default!r})")
    assert missing == []


def test_every_argument_says_its_default_or_that_it_is_required():
    """Options without a value (None, a flag that is off) and positional arguments too: the
    formatter says "(default: unset)", "(default: off)" or "(required)" where the help does
    not say its default in words."""
    silent = []
    for path, parser in every_parser(cli.build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if (
                isinstance(action, argparse._SubParsersAction)
                or action.default is argparse.SUPPRESS
            ):
                continue
            shown = formatter._expand_help(action) if action.help else ""
            if "default" not in shown.lower() and "(required)" not in shown:
                silent.append(f"sparkops {' '.join(path)} {action.option_strings or action.dest}")
    assert silent == []


def test_help_says_the_defaults_the_issue_found_missing():
    def help_of(*command: str) -> str:
        proc = subprocess.run(
            [*SPARKOPS, *command, "--help"], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        return " ".join(proc.stdout.split())

    assert (
        "max_num_seqs (default: the inventory's vllm_serving_concurrency, else unchecked)"
        in help_of("render")
    )
    assert "vLLM --max-num-seqs (default: vLLM's own)" in help_of("local", "up")
    status = help_of("batch", "status")
    assert "dir the job folder (batch run's --out) (required)" in status
    assert "--json print the status as one JSON object (default: off)" in status


def test_every_help_prints_without_error(capsys):
    for path, _ in every_parser(cli.build_parser()):
        with pytest.raises(SystemExit) as exit_:
            cli.main([*path, "--help"])
        assert exit_.value.code == 0, path
        assert capsys.readouterr().out.startswith("usage: sparkops")


def test_sweep_takes_every_shared_batch_option_with_the_same_default():
    parser = cli.build_parser()
    run = options(subparser(parser, "batch", "run"))
    sweep = options(subparser(parser, "bench", "sweep"))
    shared = set(run) - BATCH_ONLY
    assert shared == {flag.flag for _, flag in job_fields("sweep").values()}
    assert set(run) - {"--help"} == {flag.flag for _, flag in job_fields("run").values()}
    for flag in shared:
        a, b = run[flag], sweep.get(flag)
        assert b is not None, f"bench sweep lacks {flag}"
        for attr in ("default", "type", "choices", "required", "help", "nargs", "const"):
            assert getattr(a, attr) == getattr(b, attr), (flag, attr)
    # The drift the issue found: the sweep now samples as often as a batch job.
    assert sweep["--sample-interval"].default == run["--sample-interval"].default == 5.0


def test_both_commands_hand_the_same_settings_to_the_job():
    given = [
        "--endpoint=http://a:1",
        "--endpoint=http://b:2",
        "--schedule=step-aware",
        "--schedule-max-wait=7",
        "--api-key-env=KEY",
        "--id-field=nid",
        "--restart",
        "--request-timeout=9",
        "--retry-for=11",
        "--fail-fast=0",
        "--sample-interval=0.5",
        "--stall-after=13",
        "--strict-serving",
        "--stack-record=stack-record.json",
        "--no-progress",
    ]
    parser = cli.build_parser()
    run = parser.parse_args(["batch", "run", "--input=i", "--out=o", *given])
    sweep = parser.parse_args(["bench", "sweep", "--input=i", "--out=o", "--pipeline=p", *given])
    settings = job_settings(sweep, "sweep")
    assert {k: v for k, v in job_settings(run).items() if k in settings} == settings
    assert settings["policy"] == "step-aware" and settings["progress"] is False
    assert settings["endpoints"] == ["http://a:1", "http://b:2"]
    config = JobConfig(input=Path("i"), out=Path("o"), **settings)  # every key is a field
    assert (config.retry_for, config.fail_fast, config.strict_serving) == (11.0, 0, True)
    assert job_config(**job_settings(run)) == config  # batch run's own four are the defaults


def test_every_job_default_is_the_schemas():
    """A default exists once: the parser's, the engine's and JobConfig's are the same value."""
    parser = cli.build_parser()
    run = subparser(parser, "batch", "run")
    for name, (field, flag) in job_fields("run").items():
        action = options(run)[flag.flag]
        if not field.is_required():
            assert action.default == field.default, name
    engine = EngineConfig()
    for name, field in EngineSettings.model_fields.items():
        assert getattr(engine, name) == field.default == JobConfig.model_fields[name].default
    config = JobConfig(input=Path("i"), out=Path("o"), endpoints=["http://a:1"], concurrency=7)
    assert config.engine() == EngineSettings(
        **{**engine.model_dump(include=set(EngineSettings.model_fields)), "concurrency": 7}
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ["--request-timeout", "0"],
            "--request-timeout: must be a finite number above 0 (got '0')",
        ),
        (
            ["--request-timeout", "-1"],
            "--request-timeout: must be a finite number above 0 (got '-1')",
        ),
        (
            ["--request-timeout", "inf"],
            "--request-timeout: must be a finite number above 0 (got 'inf')",
        ),
        (["--retry-for", "1e999"], "--retry-for: must be a finite number above 0 (got '1e999')"),
        (
            ["--sample-interval", "nan"],
            "--sample-interval: must be a finite number above 0 (got 'nan')",
        ),
        (
            ["--status-interval", "0"],
            "--status-interval: must be a finite number above 0 (got '0')",
        ),
        (["--stall-after", "-5"], "--stall-after: must be a finite number 0 or more (got '-5')"),
        (["--concurrency", "-3"], "--concurrency: must be a whole number 1 or more (got '-3')"),
        (["--concurrency", "0"], "--concurrency: must be a whole number 1 or more (got '0')"),
        (["--concurrency", "2.5"], "--concurrency: must be a whole number 1 or more (got '2.5')"),
        (["--fail-fast", "-1"], "--fail-fast: must be a whole number 0 or more (got '-1')"),
        (
            ["--schedule-max-wait", "0"],
            "--schedule-max-wait: must be a whole number 1 or more (got '0')",
        ),
    ],
)
def test_every_number_option_is_bounded_with_one_message(tmp_path, argv, named):
    """Out of bounds: exit 2, one line naming the option, what it allows and the value given,
    before anything is read or sent (the input does not even exist)."""
    proc = subprocess.run(
        [
            *SPARKOPS,
            "batch",
            "run",
            "--input",
            str(tmp_path / "none.jsonl"),
            "--out",
            str(tmp_path / "job"),
            "--endpoint",
            "http://127.0.0.1:9",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"sparkops batch run: error: argument {named}"
    assert not (tmp_path / "job").exists()


def test_the_sweep_checks_the_same_bounds(tmp_path):
    proc = subprocess.run(
        [
            *SPARKOPS,
            "bench",
            "sweep",
            "--input=i",
            "--out=o",
            "--pipeline=p",
            "--endpoint=http://127.0.0.1:9",
            "--request-timeout=inf",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "argument --request-timeout: must be a finite number above 0 (got 'inf')" in proc.stderr


def test_a_library_caller_gets_the_same_bounds_as_a_user_error():
    with pytest.raises(
        UserError, match=r"--request-timeout must be a finite number above 0 \(got inf\)"
    ):
        job_config(input="i", out="o", endpoints=["http://a:1"], request_timeout=float("inf"))
    with pytest.raises(UserError, match=r"^--schedule "):
        job_config(input="i", out="o", endpoints=["http://a:1"], policy="random")


def test_report_json_prints_what_report_json_holds(tmp_path, capsys):
    job = small_job(tmp_path)
    assert cli.main(["report", str(job), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((job / "report.json").read_text())
    assert printed["done"] == 2


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        # argparse drops a help text it cannot write and exits 0 itself
        (["--help"], 0),
        (["batch", "run", "--help"], 0),
        (["report", "--json", "JOB"], cli.EXIT_BROKEN_PIPE),
        (["report", "JOB"], cli.EXIT_BROKEN_PIPE),
    ],
)
def test_a_reader_that_stops_early_gets_no_traceback(tmp_path, argv, status):
    """The reader's end of the pipe is closed before sparkops writes a byte: every write
    fails with EPIPE, deterministically (a `| head -1` might read it all in time)."""
    job = small_job(tmp_path)
    argv = [str(job) if a == "JOB" else a for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run(
        [*SPARKOPS, *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120
    )
    os.close(write_end)
    assert proc.returncode == status
    assert "Traceback" not in proc.stderr
    assert "BrokenPipe" not in proc.stderr
    assert proc.stderr == ""


def test_piped_to_head(tmp_path):
    job = small_job(tmp_path)
    proc = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -1', "sh", *SPARKOPS, "report", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, cli.EXIT_BROKEN_PIPE)
    assert proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_the_command_lists_mark_no_command_as_required():
    """Issue 31 item 14: `sparkops --help` marked every sub-command "(required)"; choosing a
    command is required, but each entry of the list is a choice, not an argument."""
    for path, parser in every_parser(cli.build_parser()):
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            continue
        text = parser.format_help()
        listing = text.split("positional arguments:", 1)[1].split("\n\n", 1)[0]
        assert "(required)" not in listing, (path, listing)


def test_an_endpoint_with_a_query_string_is_refused_with_the_fix(tmp_path):
    """Issue 34 item 14: `?api_key=...` in --endpoint could never work (the kit appends
    /v1/models after the query) and the message blamed the server. Refused before anything
    is read or sent (exit 2), the secret redacted, the fix named."""
    from sparkops.samples import SMALL_PIPELINE
    from tests.plugins.cli import sparkops as run_sparkops

    (tmp_path / "in.jsonl").write_text('{"id": "1", "text": "a"}\n')
    for url in ("http://127.0.0.1:9/v1?api_key=sekrit", "http://127.0.0.1:9/v1#x"):
        proc = run_sparkops(
            "batch", "run", "--pipeline", str(SMALL_PIPELINE), "--input",
            str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "job"), "--endpoint", url,
            "--no-progress", timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("sparkops: error: --endpoint http://127.0.0.1:9/v1")
        assert "query string" in line and "--api-key-env" in line and "sekrit" not in line
        assert "cannot reach" not in line and not (tmp_path / "job").exists()


def test_every_option_says_what_it_is():
    """Issue 31 item 14: no option's help is only its default (or empty): each says what it
    sets, in every sub-command."""
    bare = []
    for path, parser in every_parser(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            words = " ".join(str(action.help or "").split()).lower()
            if not words or words.startswith(("default", "(default", "(required)")):
                bare.append(f"sparkops {' '.join(path)} {action.option_strings or action.dest}")
    assert bare == []
