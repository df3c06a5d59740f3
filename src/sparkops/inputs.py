"""The one reader of the YAML and JSON files a user hands the kit (profiles, pipelines,
inventories, stack records, model configs).

Every way such a file can be wrong — missing, a folder, unreadable, not UTF-8, a syntax
error, the wrong kind of document — becomes one `UserError` that names the file, the line
where the parser stopped, and the fix the caller passes in. Callers validate the content
(pydantic models); this module only turns bytes into Python values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sparkops.errors import UserError

_KINDS = {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}


def _kind(value: object) -> str:
    return _KINDS.get(type(value), f"a {type(value).__name__}")


def read_text(path: str | Path, *, what: str, fix: str) -> str:
    """The UTF-8 text of `path`; a missing, unreadable or non-UTF-8 file is a UserError
    "<what> <path> ...; <fix>"."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist; {fix}") from None
    except OSError as err:
        raise UserError(f"{what} {path} cannot be read ({type(err).__name__}); {fix}") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {err.start}); {fix}") from None


def _check_top(data: Any, top: type | None, path: Path, what: str, fix: str, fmt: str) -> Any:
    if top is None or isinstance(data, top):
        return data
    noun = "JSON object" if fmt == "JSON" and top is dict else f"{fmt} {_kind(top())[2:]}"
    raise UserError(f"{what} {path} is not a {noun} (it holds {_kind(data)}); {fix}")


def parse_yaml(
    text: str,
    path: str | Path,
    *,
    what: str,
    fix: str,
    top: type | None = dict,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
) -> Any:
    """YAML `text` read from `path`, its top level of type `top` (None: any). A syntax error
    names the line and the parser's reason."""
    path = Path(path)
    try:
        data = yaml.load(text, Loader=loader)  # the loader is a SafeLoader (sub)class
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{what} {path} is not valid YAML ({line}{problem}); {fix}") from None
    return _check_top(data, top, path, what, fix, "YAML")


def parse_json(text: str, path: str | Path, *, what: str, fix: str, top: type | None = dict) -> Any:
    """JSON `text` read from `path`, its top level of type `top` (None: any)."""
    path = Path(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"{what} {path} is not valid JSON (line {err.lineno}: {err.msg}); {fix}"
        ) from None
    return _check_top(data, top, path, what, fix, "JSON")


def read_yaml(
    path: str | Path,
    *,
    what: str,
    fix: str,
    top: type | None = dict,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
) -> Any:
    """Read and parse a YAML file; every failure is one UserError naming the file and `fix`."""
    text = read_text(path, what=what, fix=fix)
    return parse_yaml(text, path, what=what, fix=fix, top=top, loader=loader)


def read_json(path: str | Path, *, what: str, fix: str, top: type | None = dict) -> Any:
    """Read and parse a JSON file; every failure is one UserError naming the file and `fix`."""
    return parse_json(read_text(path, what=what, fix=fix), path, what=what, fix=fix, top=top)
