"""No record text or secret in an error line; inputs that are not text are never decided
(issue 37, item 10 and item 9's null/number fields and repeated endpoints).

Each refusal runs `sparkops batch run` (in this process: `sparkops.cli.main`, as the
command line calls it; every refusal comes before any request) against the fault server with
a hostile input whose records carry a marker: the exit status, the one `sparkops:` line
naming the file's real format (or the option's real meaning) and the fix, nothing sent to the
server, and the marker (a record's text, or the key) in no output and no file the run left.
The record-level case runs a whole job as a subprocess.
"""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from sparkops import cli as sparkops_cli
from sparkops.batch.input_format import looks_like_name
from sparkops.batch.options import job_config
from sparkops.errors import UserError
from sparkops.pipeline.check import probe_records
from sparkops.pipeline.prompt import RecordError, build_messages, build_request
from sparkops.pipeline.spec import load_pipeline
from tests.plugins import cli
from tests.plugins.cli import batch_run
from tests.plugins.fault_server import FaultServer

sparkops = partial(cli.sparkops, limit=60.0)
SECRET = "SECRETNOTE left arm weak since this morning"
KEY = "sk-proj-4f9a8c7e6d5b4a3f2e1d0c9b8a7f6e5d"
WRONG_ADVICE = ("cp1252", "iconv")


@dataclass(frozen=True)
class Ran:
    """A `sparkops` command's exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def batch(capsys):
    """`batch(job, *endpoints, extra=())`: `sparkops batch run` in this process."""

    def run_batch(job, *endpoints: str, extra: tuple[str, ...] = ()) -> Ran:
        argv = batch_run(job, *endpoints, extra=extra)[len(cli.SPARKOPS) :]
        status = sparkops_cli.main(argv)
        out, err = capsys.readouterr()
        return Ran(status, out, err)

    return run_batch


def refused(proc: Ran | cli.Finished, server: FaultServer, *words: str) -> str:
    """Exit 2, one `sparkops:` line holding `words`, nothing sent to the server."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("sparkops:")]
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert sum(server.paths.values()) == 0, server.paths
    return lines[0]


def nowhere(secret: str, proc: Ran, root: Path, *inputs: Path) -> None:
    """`secret` is in neither output nor any file under `root` but the inputs themselves."""
    assert secret not in proc.stdout + proc.stderr
    for path in root.rglob("*"):
        if path.is_file() and path not in inputs:
            assert secret.encode() not in path.read_bytes(), path


def _xlsx(secret: str) -> bytes:
    """A workbook as Excel writes one (the parts the kit looks at), stored uncompressed so
    the cell's text is in the file's bytes as it is."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as book:
        book.writestr("[Content_Types].xml", "<Types/>")
        book.writestr("xl/workbook.xml", "<workbook/>")
        book.writestr(
            "xl/sharedStrings.xml", f"<sst><si><t>id</t></si><si><t>{secret}</t></si></sst>"
        )
    return buffer.getvalue()


def _zip(secret: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("notes.jsonl", json.dumps({"id": "r1", "text": secret}) + "\n")
    return buffer.getvalue()


JSONL = "".join(json.dumps({"id": f"r{i}", "text": f"{SECRET} {i}"}) + "\n" for i in range(3))
NO_HEADER = "".join(f"r{i},{SECRET} {i}\n" for i in range(3))

# (file name, bytes, words the line must hold), one per format a newcomer gives
FORMATS = [
    pytest.param(
        "in.csv",
        JSONL.encode(),
        ("is JSON Lines, not CSV", "rename it to in.jsonl"),
        id="jsonl-named-csv",
    ),
    pytest.param(
        "in.csv",
        NO_HEADER.encode(),
        ("has no header row", "first line of a CSV must name"),
        id="csv-without-header",
    ),
    pytest.param(
        "in.csv",
        "".join(f"{1000 + i},{SECRET}\n" for i in range(3)).encode(),
        ("has no header row", "must name the columns"),
        id="csv-without-header-number-ids",
    ),
    pytest.param(
        "in.csv",
        f"id;text\nr1;{SECRET}\nr2;{SECRET}, again\n".encode(),
        ("separated by semicolons", "not commas", "delimiter=';'", "in-comma.csv"),
        id="semicolon-csv",
    ),
    pytest.param(
        "in.csv",
        f"r1;{SECRET}\nr2;{SECRET}\n".encode(),
        ("separated by semicolons", "delimiter=';'"),
        id="semicolon-csv-without-header",
    ),
    pytest.param(
        "in.csv",
        f"id\ttext\nr1\t{SECRET}\n".encode(),
        ("separated by tabs", "delimiter='\\t'"),
        id="tab-csv",
    ),
    pytest.param(
        "in.jsonl.gz",
        gzip.compress(JSONL.encode()),
        ("gzip-compressed", "gunzip -c in.jsonl.gz > in.jsonl"),
        id="gzip",
    ),
    pytest.param(
        "in.csv",
        gzip.compress(NO_HEADER.encode()),
        ("gzip-compressed", "gunzip -c in.csv"),
        id="gzip-named-csv",
    ),
    pytest.param(
        "in.xlsx",
        _xlsx(SECRET),
        ("Excel workbook (.xlsx)", "CSV UTF-8 (Comma delimited)"),
        id="xlsx",
    ),
    pytest.param(
        "in.csv",
        _xlsx(SECRET),
        ("Excel workbook (.xlsx)", "CSV UTF-8 (Comma delimited)"),
        id="xlsx-named-csv",
    ),
    pytest.param(
        "in.xls",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + SECRET.encode() + b"\x00\xff" * 64,
        ("Excel 97-2003 workbook", "CSV UTF-8"),
        id="xls",
    ),
    pytest.param("in.zip", _zip(SECRET), ("is a zip archive", "unzip it"), id="zip"),
    pytest.param(
        "in.jsonl",
        f"id,text\nr1,{SECRET}\nr2,{SECRET}\n".encode(),
        ("is not JSON Lines", "name it .csv"),
        id="csv-named-jsonl",
    ),
]


# ---- item 10: the file's real format and the fix, never its text ---------------------------
@pytest.mark.parametrize(("name", "body", "words"), FORMATS)
def test_an_input_in_another_format_is_named_with_its_fix_and_never_quoted(
    job, fault_server, batch, name, body, words
):
    job["input"] = job["input"].with_name(name)
    job["input"].write_bytes(body)
    proc = batch(job, fault_server.openai_url)
    line = refused(proc, fault_server, *words)
    assert not any(advice in line for advice in WRONG_ADVICE), line
    nowhere("SECRETNOTE", proc, job["input"].parent, job["input"])
    assert not job["out"].exists()


def test_a_header_that_names_its_columns_is_still_shown_with_the_id_field_fix(
    job, fault_server, batch
):
    job["input"] = job["input"].with_name("in.csv")
    job["input"].write_text(f"record,Patient note\nr1,{SECRET}\n")
    url = fault_server.openai_url
    refused(batch(job, url), fault_server, "columns: record, Patient note", "--id-field")
    job["input"].write_text(f"ID,text\nr1,{SECRET}\n")
    refused(batch(job, url), fault_server, "has 'ID'", "--id-field 'ID'")


@pytest.mark.parametrize(
    ("cell", "name"),
    [
        ("note_text", True),
        ("Patient ID", True),
        ("Patient note (free text)", True),
        ("r17", False),  # an id
        ("1000", False),
        ("2024-01-03", False),
        ("left arm weak since this morning", False),  # a sentence
        ("weak, since 9am", False),
        ("", False),
    ],
)
def test_a_header_cell_reads_as_a_name_only_without_digits_or_sentences(cell, name):
    assert looks_like_name(cell) is name


def test_a_csv_starting_with_an_empty_line_says_so(job, fault_server, batch):
    job["input"] = job["input"].with_name("in.csv")
    job["input"].write_text(f"\nid,text\nr1,{SECRET}\n")
    line = refused(batch(job, fault_server.openai_url), fault_server, "starts with an empty line")
    assert "SECRETNOTE" not in line


def test_a_good_csv_still_runs(job, fault_server):
    job["input"] = job["input"].with_name("in.csv")
    job["input"].write_text("id,text\nr1,[id:r1] note\nr2,[id:r2] note\n")
    done = sparkops(*batch_run(job, fault_server.openai_url))
    assert done.returncode == 0, done.stderr
    assert fault_server.requests["r1"] == fault_server.requests["r2"] == 1


# ---- item 10: --api-key-env given the key itself -------------------------------------------
@pytest.mark.parametrize(
    "value",
    [KEY, "sk_live_51Hxyz", "hf_AbCdEfGhIjKlMnOpQrStUv", "a1b2c3d4e5f6a7b8c9d0e1f2", "my key"],
)
def test_api_key_env_given_a_key_says_it_takes_a_name_without_echoing_it(
    job, fault_server, batch, value
):
    job["input"].write_text(json.dumps({"id": "r1", "text": "[id:r1] x"}) + "\n")
    proc = batch(job, fault_server.openai_url, extra=("--api-key-env", value))
    refused(proc, fault_server, "--api-key-env takes the NAME of an environment variable")
    nowhere(value, proc, job["input"].parent)
    assert not job["out"].exists()


def test_a_key_beside_a_url_with_credentials_is_still_not_echoed(job, fault_server, batch):
    job["input"].write_text(json.dumps({"id": "r1", "text": "[id:r1] x"}) + "\n")
    url = fault_server.openai_url.replace("http://", "http://user:pw@")
    proc = batch(job, url, extra=("--api-key-env", KEY))
    refused(proc, fault_server, "takes the NAME")
    assert KEY not in proc.stderr + proc.stdout


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "LITELLM_MASTER_KEY", "key2", "_k"])
def test_a_variable_name_is_accepted(tmp_path, name):
    cfg = job_config(
        input=tmp_path / "in.jsonl", out=tmp_path / "o", endpoints=["http://h:1"], api_key_env=name
    )
    assert cfg.api_key_env == name


# ---- item 9: the same endpoint twice -------------------------------------------------------
@pytest.mark.parametrize("second", ["{url}", "{url}/", "{url}/v1", "{url}/v1/", "{upper}"])
def test_the_same_endpoint_twice_is_refused_naming_it(job, fault_server, batch, second):
    job["input"].write_text(json.dumps({"id": "r1", "text": "[id:r1] x"}) + "\n")
    url = fault_server.url
    again = second.format(url=url, upper=url.replace("http://", "HTTP://"))
    proc = batch(job, url, again)
    refused(proc, fault_server, "is given twice", str(fault_server.port), "give each server once")
    assert not job["out"].exists()


def test_two_servers_and_a_credentialled_pair_are_told_apart(tmp_path):
    base = {"input": tmp_path / "i.jsonl", "out": tmp_path / "o"}
    assert len(job_config(**base, endpoints=["http://h:1", "http://h:2"]).endpoints) == 2
    with pytest.raises(UserError, match="given twice") as caught:
        job_config(**base, endpoints=["http://u:secret@h:1/v1", "http://u:secret@h:1"])
    assert "secret" not in str(caught.value)


# ---- item 9: a field with no text is the record's error, never sent ------------------------
TEMPLATE_PIPELINE = """\
name: one
model: tiny
steps:
  - name: screen
    user: "[id:{id}] Note: {text}"
    max_tokens: 4
    parse: {choices: ["yes", "no"], default: unclear}
"""

NOT_TEXT = {
    "r2": (None, "is empty (null)"),
    "r3": (8675309, "holds a number, not text"),
    "r4": ("", "is empty;"),
    "r5": ("  \n ", "is empty;"),
    "r6": (["a note", "in a list"], "holds a list, not text"),
    "r7": ({"a": "note"}, "holds an object, not text"),
    "r8": (True, "holds true/false, not text"),
}


def test_a_record_whose_text_is_null_a_number_or_empty_is_its_error_and_never_sent(
    job, fault_server
):
    job["pipeline"].write_text(TEMPLATE_PIPELINE)
    rows = [{"id": "r1", "text": "a note"}]
    rows += [{"id": rid, "text": value} for rid, (value, _) in NOT_TEXT.items()]
    rows += [{"id": "r9", "text": "another note"}]
    job["input"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = sparkops(*batch_run(job, fault_server.openai_url))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    lines = {
        x["id"]: x for x in map(json.loads, (job["out"] / "results.jsonl").read_text().splitlines())
    }
    assert {k: v["status"] for k, v in lines.items()} == {
        "r1": "done",
        "r9": "done",
        **dict.fromkeys(NOT_TEXT, "error"),
    }
    for rid, (_, why) in NOT_TEXT.items():
        assert f"field 'text' {why}" in lines[rid]["error"], lines[rid]
        assert lines[rid]["error_kind"] == "record"
        assert fault_server.requests[rid] == 0
    assert fault_server.requests["r1"] == fault_server.requests["r9"] == 1
    assert "8675309" not in proc.stdout + proc.stderr + lines["r3"]["error"]
    assert "shifted column" in lines["r3"]["error"]


def _step(tmp_path: Path):
    (tmp_path / "p.yaml").write_text(TEMPLATE_PIPELINE)
    return load_pipeline(tmp_path / "p.yaml").first


@pytest.mark.parametrize(("value", "why"), [v for v in NOT_TEXT.values()])
def test_build_request_refuses_a_field_without_text_naming_it_not_its_value(tmp_path, value, why):
    with pytest.raises(RecordError, match="field 'text'") as caught:
        build_request(_step(tmp_path), "tiny", {"id": "r1", "text": value})
    assert why in str(caught.value)
    assert "8675309" not in str(caught.value) and "a note" not in str(caught.value)


def test_a_csv_cell_that_is_empty_or_absent_is_refused_and_text_is_sent(tmp_path):
    step = _step(tmp_path)
    for row in ({"id": "r1", "text": ""}, {"id": "r1", "text": None}):  # csv's restval: None
        with pytest.raises(RecordError, match="is empty"):
            build_request(step, "tiny", row)
    body = build_request(step, "tiny", {"id": "r1", "text": "12345"})  # CSV cells are text
    assert body["messages"][-1]["content"] == "[id:r1] Note: 12345"


def test_the_prefix_probe_still_builds_its_empty_record(tmp_path):
    step = _step(tmp_path)
    fixed = build_messages(step, probe_records(step)[2])  # every field "" on purpose
    assert fixed[-1]["content"] == "[id:] Note: "


def test_a_number_column_is_sent_and_a_number_in_a_text_column_is_refused():
    """A field the first record holds as a number (`"age": 62`) is a number column: its
    numbers are values. A number where the first record has text is a shifted column."""
    from sparkops.batch.fate import RecordState
    from sparkops.batch.records import Record
    from sparkops.batch.workload import Pipeline
    from sparkops.pipeline.spec import parse_pipeline

    spec = parse_pipeline(
        {
            "name": "t",
            "model": "m",
            "steps": [
                {
                    "name": "s",
                    "user": "Age: {age}. Note: {text}",
                    "parse": {"choices": ["yes", "no"]},
                }
            ],
        }
    )
    work = Pipeline(spec)
    work.check_first(Record("r1", 1, {"text": "a note", "age": 62}), Path("in.jsonl"))

    def sent(fields: dict) -> str:
        _, body = work.request(RecordState(Record("r2", 2, fields), "s"), None)
        return body["messages"][-1]["content"]

    assert sent({"text": "x", "age": 70}) == "Age: 70. Note: x"
    assert sent({"text": "x", "age": 70.5}) == "Age: 70.5. Note: x"
    assert sent({"text": "x", "age": "seventy"}) == "Age: seventy. Note: x"
    with pytest.raises(RecordError, match="field 'text' holds a number") as caught:
        sent({"text": 8675309, "age": 70})
    assert "8675309" not in str(caught.value)
    with pytest.raises(RecordError, match="field 'age' is empty"):
        sent({"text": "x", "age": None})
