"""Extraction steps: an answer that is a JSON object of named fields, held to a JSON Schema.

A step may extract fields instead of choosing one label. Its schema is written either as a
compact field list in the pipeline YAML::

    extract:
      fields:
        severity: [minor, major, unclear]           # an enum
        age: {type: integer, minimum: 0, maximum: 120}
        side: {enum: [left, right, both, none]}
        summary: {type: string, maxLength: 80}
        anticoagulated: boolean
      route: severity                               # optional: `next` routes on this field
      default: unclear

or as a JSON Schema file beside the pipeline (`schema: detail.schema.json`). Either way the
server holds the answer to the schema (pipeline/constrain.py) and the client validates it again
here with `jsonschema`: a server that ignored the constraint, or an answer cut off by
`max_tokens`, fails validation and takes the step's default route, marked `parsed: false` in
results.jsonl, never recorded as a decision.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import jsonschema  # type: ignore[import-untyped]  # no stubs pinned
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkops.errors import UserError
from sparkops.pipeline.kinds import Count, Mode, Reading

# The label of an extraction step whose answer validated, when it routes on no field.
OK = "ok"
# Extra tokens an extraction answer gets over its longest instance (a tokenizer may split
# a value where the instance's text did not).
JSON_MARGIN = 8
# The longest text a JSON number takes (a double's repr) and an integer without a range.
_NUMBER = -1.2345678901234567e308
_INTEGER = -9223372036854775808

_TYPES = ("string", "integer", "number", "boolean")


class FieldSpec(BaseModel):
    """One field of the compact list: a type, or an enum; numbers may carry a range and
    strings a maximum length (JSON Schema's own key names)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["string", "integer", "number", "boolean"] | None = None
    enum: list[str] | None = Field(default=None, min_length=1)
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = Field(default=None, ge=1, alias="maxLength")

    @model_validator(mode="after")
    def _consistent(self) -> FieldSpec:
        if self.enum is None and self.type is None:
            raise ValueError("a field needs a type (string, integer, number, boolean) or an enum")
        if self.enum is not None and self.type not in (None, "string"):
            raise ValueError("an enum field holds strings; drop its type")
        if (self.minimum is not None or self.maximum is not None) and self.type not in (
            "integer",
            "number",
        ):
            raise ValueError("minimum/maximum apply to integer or number fields")
        if self.max_length is not None and (self.type != "string" or self.enum is not None):
            raise ValueError("maxLength applies to string fields")
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum:g} is above maximum {self.maximum:g}")
        return self

    def to_schema(self) -> dict[str, Any]:
        if self.enum is not None:
            return {"type": "string", "enum": list(self.enum)}
        out: dict[str, Any] = {"type": self.type}
        for key, value in (("minimum", self.minimum), ("maximum", self.maximum)):
            if value is not None:
                out[key] = int(value) if self.type == "integer" else value
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        return out


def _field(value: Any) -> FieldSpec:
    """`string` / `integer` / ..., a list (an enum), or a mapping."""
    if isinstance(value, str):
        if value not in _TYPES:
            raise ValueError(f"unknown field type {value!r}; use one of {', '.join(_TYPES)}")
        return FieldSpec(type=value)
    if isinstance(value, list):
        return FieldSpec(enum=[str(v) for v in value])
    if isinstance(value, dict):
        return FieldSpec.model_validate(value)
    raise ValueError(f"a field is a type name, a list of values or a mapping, not {value!r}")


class ExtractSpec(BaseModel):
    """How a step's answer becomes fields: a compact field list or a JSON Schema (read from
    the file `schema:` names, by `load_pipeline`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    fields: dict[str, Any] | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    route: str | None = None
    default: str = "unclear"

    @model_validator(mode="after")
    def _build(self) -> ExtractSpec:
        if (self.fields is None) == (self.json_schema is None):
            raise ValueError(
                "extract needs fields: {name: type, ...} or schema: FILE.json (one of them)"
            )
        if self.fields is not None:
            if not self.fields:
                raise ValueError("extract.fields is empty; name at least one field")
            built = {}
            for name, value in self.fields.items():
                try:
                    built[name] = _field(value).to_schema()
                except ValueError as err:
                    raise ValueError(f"field {name!r}: {_first_line(err)}") from None
            self.fields = built
        else:
            assert self.json_schema is not None
            try:
                jsonschema.Draft202012Validator.check_schema(self.json_schema)
            except jsonschema.SchemaError as err:
                raise ValueError(f"schema is not a valid JSON Schema: {err.message}") from None
            if self.json_schema.get("type") != "object":
                raise ValueError('schema must describe an object ("type": "object")')
        if self.route is not None:
            values = self.route_values
            if values is None:
                raise ValueError(
                    f"route: {self.route!r} is not an enum field of this step; route on a "
                    "field whose values are listed (e.g. severity: [minor, major])"
                )
            if self.default in values:
                raise ValueError(
                    f"default {self.default!r} is also a value of {self.route!r}; an answer "
                    "that fails validation must be told apart: pick another default"
                )
        return self

    @property
    def answer_schema(self) -> dict[str, Any]:
        """The JSON Schema the answer is held to (on the server) and validated with here."""
        if self.json_schema is not None:
            return self.json_schema
        assert self.fields is not None
        return {
            "type": "object",
            "properties": self.fields,
            "required": list(self.fields),
            "additionalProperties": False,
        }

    @property
    def field_names(self) -> list[str]:
        """The top-level fields, in order (the CSV's columns for this step)."""
        props = self.answer_schema.get("properties")
        return list(props) if isinstance(props, dict) else []

    @property
    def route_values(self) -> list[str] | None:
        """The enum values of the routing field (None: not an enum of strings)."""
        if self.route is None:
            return None
        prop = (self.answer_schema.get("properties") or {}).get(self.route)
        enum = prop.get("enum") if isinstance(prop, dict) else None
        if not isinstance(enum, list) or not all(isinstance(v, str) for v in enum):
            return None
        if self.route not in (self.answer_schema.get("required") or []):
            return None
        return list(enum)

    @property
    def labels(self) -> list[str]:
        """What `next` routes on: the routing field's values (or `ok`), then the default."""
        values = self.route_values if self.route is not None else [OK]
        assert values is not None
        return [*values, self.default]

    # ---- the answer kind (pipeline/kinds.py) ------------------------------------------
    @property
    def held_mode(self) -> Mode:
        return "json"

    def constraint(self) -> dict[str, Any]:
        return {"json": self.answer_schema}

    def budget_texts(self) -> list[str]:
        bound = longest_instance(self.answer_schema)
        return [] if bound is None else [json.dumps(bound[0], indent=2)]

    def budget(self, count: Count, held: bool, step: str) -> int:
        """Room for the longest answer the schema allows (held or not: a free answer is read
        against the same schema)."""
        bound = longest_instance(self.answer_schema)
        if bound is None:
            raise UserError(_unbounded_message(step, self))
        instance, chars = bound
        return count(json.dumps(instance, indent=2)) + chars + JSON_MARGIN

    def problem(self, step: str, held: bool) -> str | None:
        return None

    def holds(self, text: str, cut: bool) -> bool:
        """A JSON value, or (cut off) the start of an object; the schema is checked in `read`
        (an answer that fails it is unparsed, not proof the constraint was dropped)."""
        if cut:
            return text.lstrip().startswith("{")
        try:
            json.loads(text)
        except ValueError:
            return False
        return True

    def read(self, text: str, held: bool, cut: bool) -> Reading:
        read = read_answer(text, self)
        entry: dict[str, Any] = {"fields": read.fields}
        if read.problem is not None:
            entry["invalid"] = read.problem
        return Reading(read.label, read.fields is not None, entry=entry)

    def columns(self) -> list[str]:
        return self.field_names

    def cells(self, entry: dict[str, Any]) -> dict[str, Any]:
        fields = entry.get("fields")
        return dict(fields) if isinstance(fields, dict) else {}


class Extracted(BaseModel):
    """One answer read against its schema: the fields, or why it is not an answer."""

    fields: dict[str, Any] | None
    problem: str | None
    label: str


def read_answer(text: str | None, spec: ExtractSpec) -> Extracted:
    """Validate an answer: its label (routing field's value, `ok`, or the default)."""
    if not text or not text.strip():
        return Extracted(fields=None, problem="empty answer", label=spec.default)
    try:
        obj = json.loads(text)
    except ValueError:
        return Extracted(fields=None, problem="not JSON (cut off?)", label=spec.default)
    validator = _validator(json.dumps(spec.answer_schema, sort_keys=True))
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "answer"
        return Extracted(fields=None, problem=f"{where}: {error.message}"[:200], label=spec.default)
    label = str(obj[spec.route]) if spec.route is not None else OK
    return Extracted(fields=obj, problem=None, label=label)


def longest_instance(schema: Mapping[str, Any]) -> tuple[Any, int] | None:
    """The longest answer `schema` allows, as (a JSON value with every string empty, the
    string characters it can still hold); None when the schema bounds no length (a string
    without maxLength, an array without maxItems, a construct this bound does not read)."""
    if "const" in schema:
        return schema["const"], 0
    if "enum" in schema:
        values = schema["enum"]
        return (max(values, key=lambda v: len(json.dumps(v))), 0) if values else None
    kind = schema.get("type")
    if kind == "boolean":
        return False, 0
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is None or high is None:
            return _INTEGER, 0
        return max(int(low), int(high), key=lambda b: len(str(b))), 0
    if kind == "number":
        return _NUMBER, 0
    if kind == "string":
        limit = schema.get("maxLength")
        return ("", int(limit)) if isinstance(limit, int) else None
    if kind == "array":
        items, most = schema.get("items"), schema.get("maxItems")
        if not isinstance(items, dict) or not isinstance(most, int):
            return None
        one = longest_instance(items)
        return None if one is None else ([one[0]] * most, one[1] * most)
    if kind == "object":
        props = schema.get("properties") or {}
        out: dict[str, Any] = {}
        chars = 0
        for name, prop in props.items():
            one = longest_instance(prop) if isinstance(prop, dict) else None
            if one is None:
                return None
            out[name], extra = one
            chars += extra
        return out, chars
    return None


def unbounded_fields(extract: ExtractSpec) -> list[str]:
    """The fields whose longest value the schema does not bound (no budget derivable)."""
    props = extract.answer_schema.get("properties") or {}
    return [n for n, p in props.items() if not isinstance(p, dict) or longest_instance(p) is None]


def _unbounded_message(step: str, extract: ExtractSpec) -> str:
    names = unbounded_fields(extract) or ["(the schema)"]
    return (
        f"step {step!r}: field(s) {names} have no length bound, so no answer budget can "
        "be derived; give each string a maxLength (each list a maxItems), or set max_tokens "
        "on the step"
    )


@functools.lru_cache(maxsize=64)
def _validator(schema: str) -> jsonschema.Draft202012Validator:
    """One compiled validator per schema (every answer of a step asks)."""
    return jsonschema.Draft202012Validator(json.loads(schema))


def schema_path(name: str, base: Path) -> Path:
    """The file `schema: FILE.json` names (relative to the pipeline YAML's folder `base`)."""
    return (base / Path(name).expanduser()).resolve()


def resolve_schema_file(extract: dict[str, Any], base: Path) -> None:
    """`schema: FILE.json` (relative to the pipeline YAML) becomes the schema it holds."""
    name = extract.get("schema")
    if not isinstance(name, str):
        return
    path = schema_path(name, base)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise UserError(
            f"extract.schema: {name!r} names {path}, which was not found; create the JSON "
            "Schema file (relative to the pipeline YAML), or list the fields inline"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise UserError(f"JSON Schema file {path} cannot be read ({reason}); fix it") from None
    try:
        schema = json.loads(text)
    except ValueError as err:
        raise UserError(f"JSON Schema file {path} is not JSON ({err}); fix the file") from None
    if not isinstance(schema, dict):
        raise UserError(f"JSON Schema file {path} is not a JSON object; fix the file")
    extract["schema"] = schema


def _first_line(err: Exception) -> str:
    """A pydantic error's message without its links and indented detail."""
    text = str(err)
    if "\n" in text:  # ValidationError: "1 validation error for X\nloc\n  msg [...]"
        lines = [ln.strip() for ln in text.splitlines()[1:] if ln.startswith("  ")]
        if lines:
            return lines[0].split(" [")[0]
    return text
