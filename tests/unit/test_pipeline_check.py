"""`sparkops pipeline check` without a server: the structural checks need no --endpoint, and a
warning is advice (exit 0), not the "stopped, resumable" status 1; --strict makes it exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from sparkops.samples import SMALL_PIPELINE
from tests.plugins.cli import sparkops

RECORD_FIRST = (
    "name: bad\nmodel: tiny\nsteps:\n  - name: s\n"
    f"    user: {json.dumps('Note: {text}. ' + 'Answer yes if a stroke is likely. ' * 30)}\n"
    "    parse: {choices: [yes, no]}\n"
)


def test_the_sample_pipeline_checks_without_a_server() -> None:
    proc = sparkops("pipeline", "check", str(SMALL_PIPELINE), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "pipeline stroke-triage-small: valid (model 'smollm2')" in proc.stdout
    assert "  screen: " in proc.stdout and "characters of shared text before the record" in (
        proc.stdout
    )
    assert "add --endpoint URL" in proc.stdout
    assert "warning" not in proc.stdout + proc.stderr


def test_record_first_is_a_warning_with_exit_0_and_strict_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(RECORD_FIRST)
    proc = sparkops("pipeline", "check", str(bad), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "warning: step s:" in proc.stdout and "put the record last" in proc.stdout
    strict = sparkops("pipeline", "check", str(bad), "--strict", timeout=120)
    assert strict.returncode == 2
    assert strict.stderr.strip().splitlines()[-1] == (
        "sparkops: error: 1 warning(s) and --strict: fix them first"
    )
    as_json = sparkops("pipeline", "check", str(bad), "--json", timeout=120)
    result = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and result["tokens_counted"] is False
    assert result["steps"][0]["after_record_chars"] == len(
        ". " + "Answer yes if a stroke is likely. " * 30
    )
    assert len(result["warnings"]) == 1


def test_a_broken_pipeline_is_refused_without_a_server(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(RECORD_FIRST + "    next: {yes: nowhere, no: stop}\n")
    proc = sparkops("pipeline", "check", str(bad), timeout=120)
    assert proc.returncode == 2 and "nowhere" in proc.stderr and "Traceback" not in proc.stderr


def test_a_format_spec_or_nested_field_in_a_template_is_one_line_exit_2(tmp_path: Path) -> None:
    """Issue 34 item 14: `{text!r:>{id}}` was "internal error" in `batch run` and a traceback
    in `pipeline check`; both now refuse it before any request, naming the placeholder."""
    bad = tmp_path / "nested.yaml"
    bad.write_text(
        "name: bad\nmodel: tiny\nsteps:\n  - name: s\n"
        '    user: "Note: {text!r:>{id}}"\n    parse: {choices: [yes, no]}\n'
    )
    (tmp_path / "in.jsonl").write_text('{"id": "5", "text": "a"}\n')
    check = sparkops("pipeline", "check", str(bad), timeout=120)
    run = sparkops(
        "batch", "run", "--pipeline", str(bad), "--input", str(tmp_path / "in.jsonl"),
        "--out", str(tmp_path / "job"), "--endpoint", "http://127.0.0.1:9", "--no-progress",
        timeout=120,
    )  # fmt: skip
    for proc in (check, run):
        assert proc.returncode == 2, proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("sparkops: error: ") and "{text!r:>{id}}" in line
        assert "use {fieldname}" in line and "internal error" not in line
    assert not (tmp_path / "job").exists()


CONSTRAINED = (
    "name: q\nmodel: tiny\nsteps:\n  - name: s\n"
    '    system: "You triage notes."\n    user: "Note: {text}"\n'
    "    parse: {choices: [yes, no]}\n"
)


def test_a_query_string_stays_at_the_end_of_every_route(tmp_path: Path, fault_server) -> None:
    """Issue 37 item 7: `--endpoint http://h:8000/v1?x=1` asked `...?x=1/metrics` (the
    server's root, the route swallowed by the query) and refused a server that was up."""
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(CONSTRAINED)
    endpoint = f"{fault_server.url}/v1?x=1"
    proc = sparkops("pipeline", "check", str(pipeline), "--endpoint", endpoint, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["block_size"] == 16  # read from /metrics
    assert fault_server.paths["/metrics"] == 1 and fault_server.paths["/v1/models"] == 1
    assert fault_server.paths["/tokenize"] >= 3  # the three probe records
    assert "?x=1/" not in proc.stdout + proc.stderr


def test_a_query_endpoint_s_error_names_the_route_before_the_query(tmp_path: Path) -> None:
    """Nothing listens: the message names the URL asked, the query after the route."""
    from tests.plugins.fault_server import free_port

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(CONSTRAINED)
    endpoint = f"http://127.0.0.1:{free_port()}/v1?x=1"
    proc = sparkops("pipeline", "check", str(pipeline), "--endpoint", endpoint)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"sparkops: error: cannot read {endpoint.replace('/v1?', '/metrics?')}; start the "
        "server or pass --block-size N"
    )
