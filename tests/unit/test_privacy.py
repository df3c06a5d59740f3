"""One privacy environment (sparkops.privacy) reaches every process the kit starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkops import privacy
from sparkops.privacy import TELEMETRY_OFF, private_env
from sparkops.render.inventory import read_inventory
from sparkops.render.stack import plan_stack
from tests.plugins.inventories import make_inventory

SRC = Path(privacy.__file__).parent


def test_the_union_of_every_library_switch():
    assert {
        "VLLM_NO_USAGE_STATS",
        "DO_NOT_TRACK",
        "HF_HUB_DISABLE_TELEMETRY",
        "RAY_USAGE_STATS_ENABLED",
        "LITELLM_TELEMETRY",
        "LITELLM_LOCAL_MODEL_COST_MAP",
    } <= TELEMETRY_OFF.keys()
    assert private_env()["HF_HUB_OFFLINE"] == private_env()["TRANSFORMERS_OFFLINE"] == "1"
    online = private_env(offline=False)
    assert online["HF_HUB_OFFLINE"] == "0"
    assert TELEMETRY_OFF.items() <= online.items()  # telemetry stays off when weights download


@pytest.mark.parametrize(
    ("model_dir", "download"), [("", False), ("", True), ("/models/tiny", False)]
)
def test_rendered_vllm_and_router_get_the_whole_set(tmp_path, model_dir, download):
    extra = {"vllm_serving_model_dir": model_dir} if model_dir else {}
    extra["vllm_serving_model_download"] = download
    inv = read_inventory(make_inventory(tmp_path, "data-parallel", **extra))
    stacks = plan_stack(inv, secrets={"LITELLM_MASTER_KEY": "sk-test"})
    for stack in stacks.values():
        assert TELEMETRY_OFF.items() <= stack.vllm["env"].items()
        assert stack.vllm["env"]["HF_HUB_OFFLINE"] == ("1" if model_dir or download else "0")
    router = stacks["spark-1"].router
    assert router is not None
    assert TELEMETRY_OFF.items() <= router["env"].items()


def test_no_module_spells_a_telemetry_switch_of_its_own():
    """A second list would drift from this one (three had, with different keys)."""
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.name != "privacy.py"
        and any(key in path.read_text() for key in (*TELEMETRY_OFF, "HF_HUB_OFFLINE"))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("http://alice:s3cr3t@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
        ("https://token@host.example/v1", "https://***@host.example/v1"),
        ("http://h:1/v1?api_key=abc&model=m", "http://h:1/v1?api_key=***&model=m"),
        ("http://h:1/v1?x=1&access_token=t0k", "http://h:1/v1?x=1&access_token=***"),
        (
            "cannot reach http://u:p%40ss@h:1/v1/models (ClientConnectorError)",
            "cannot reach http://***@h:1/v1/models (ClientConnectorError)",
        ),
        ('{"endpoint":"http://u:pw@h:1","v":{}}', '{"endpoint":"http://***@h:1","v":{}}'),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("write to a@b.example, no URL", "write to a@b.example, no URL"),
        ("http://h/v1/x@y (an @ in the path is not user information)", None),
    ],
)
def test_redact_hides_every_credential_of_a_url(given, shown):
    assert privacy.redact(given) == (given if shown is None else shown)


SECRET_QUERY_NAMES = (
    "sig", "auth", "pass", "jwt", "code", "signature", "password", "secret", "access_token",
    "key", "apikey", "X-Amz-Signature", "client_secret", "authCode", "AUTH", "id_token",
)  # fmt: skip


@pytest.mark.parametrize("name", SECRET_QUERY_NAMES)
def test_redact_hides_the_value_of_every_secret_query_name(name):
    """Issue 37 item 7: `sig=`, `auth=`, `pass=`, `jwt=` and `code=` were printed in clear."""
    url = f"http://h:8000/v1?model=m&{name}=s3cr3t-v4lue&n=2"
    shown = privacy.redact(f"cannot reach {url} (ClientConnectorError)")
    assert shown == f"cannot reach http://h:8000/v1?model=m&{name}=***&n=2 (ClientConnectorError)"
    first = privacy.redact(f"https://h/v1?{name}=s3cr3t-v4lue")
    assert first == f"https://h/v1?{name}=***"
    assert privacy.is_secret_name(name)


def test_a_secret_in_a_fragment_or_after_a_semicolon_is_hidden_too():
    """OAuth's implicit flow puts the token in the fragment; some servers split on ';'."""
    assert privacy.redact("https://h/cb#access_token=abc&state=1") == (
        "https://h/cb#access_token=***&state=1"
    )
    assert privacy.redact("http://h/v1?a=1;sig=abc") == "http://h/v1?a=1;sig=***"


@pytest.mark.parametrize(
    "name", ["design", "author", "bypass", "barcode", "signal", "model", "n", "x", "page"]
)
def test_names_that_only_contain_a_short_secret_word_stay_visible(name):
    """`sig`, `auth`, `pass` and `code` say "secret" only as a whole part of a name."""
    url = f"http://h:8000/v1?{name}=visible"
    assert privacy.redact(url) == url
    assert not privacy.is_secret_name(name)


def test_a_stack_record_key_named_by_a_short_secret_word_is_left_out():
    """The same rule drops a hand-made stack record's `auth` or `jwt` (serving.jsonl)."""
    from sparkops.batch.serving import without_secrets

    record = {"profile": "p", "auth": "Bearer x", "router": {"jwt": "e.y.z", "host": "h"}}
    assert without_secrets(record) == {"profile": "p", "router": {"host": "h"}}


def test_redact_is_idempotent():
    once = privacy.redact("http://a:b@h:1 and http://c@h:2?token=x")
    assert once == "http://***@h:1 and http://***@h:2?token=***"
    assert privacy.redact(once) == once


def test_has_credentials():
    assert privacy.has_credentials("http://u:p@h:1/v1")
    assert privacy.has_credentials("https://token@h/v1")
    assert not privacy.has_credentials("http://h:1/v1")
    assert not privacy.has_credentials("http://h:1/v1/x@y")


def test_the_kits_stderr_redacts_whatever_prints_on_it(capsys, monkeypatch):
    """sparkops.cli.main wraps stderr: a warning printed by any module is redacted."""
    import io
    import sys

    from sparkops import cli

    buffer = io.StringIO()
    stream = privacy.RedactingStream(buffer)
    print("sparkops: warning: http://u:pw@h:1/v1 is slow", file=stream)  # type: ignore[arg-type]
    assert buffer.getvalue() == "sparkops: warning: http://***@h:1/v1 is slow\n"
    assert stream.isatty() is False and stream.getvalue() == buffer.getvalue()

    seen = []

    def build_parser(argv=None):
        seen.append(type(sys.stderr).__name__)
        print("reaching http://alice:pw@127.0.0.1:9/v1", file=sys.stderr)
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", build_parser)
    assert cli.main(["batch", "status", "x"]) == 130
    assert seen == ["RedactingStream"]
    err = capsys.readouterr().err
    assert "alice" not in err and "pw@" not in err and "http://***@127.0.0.1:9/v1" in err
    assert not isinstance(sys.stderr, privacy.RedactingStream)  # put back after the command


def test_the_job_folders_side_files_never_hold_a_credential(tmp_path):
    """Whoever writes a side file line or a small JSON file (runs, timeline, serving,
    prefix), a URL's credentials are redacted in it."""
    from sparkops.jobdir.durable import append_json, write_json_atomic

    append_json(tmp_path / "runs.jsonl", {"event": "x", "endpoint": "http://u:pw@h:1"})
    append_json(tmp_path / "runs.jsonl", {"event": "y", "note": "no url, caf\u00e9"})
    write_json_atomic(tmp_path / "prefix.json", {"note": "https://tok@h/tokenize failed"})
    assert (tmp_path / "runs.jsonl").read_text(encoding="utf-8").splitlines() == [
        '{"event":"x","endpoint":"http://***@h:1"}',
        '{"event":"y","note":"no url, caf\u00e9"}',
    ]
    assert "tok@" not in (tmp_path / "prefix.json").read_text()
    assert "https://***@h/tokenize" in (tmp_path / "prefix.json").read_text()
