"""Values in the env files docker compose reads (serving.env, router.env), written and read back.

`docker compose` parses an `env_file` as a dotenv file and interpolates it: an unquoted
`sk-a$HOME` reaches the container as `sk-a/root`, a ` #` starts a comment, a quote opens a
quoted value. A secret must reach vLLM and LiteLLM exactly as given, so a value that holds
anything but plain characters is written double-quoted with `\\` and `"` escaped and every `$`
doubled (compose's own escape), which compose reads back as the value itself. Plain values
(Hugging Face tokens, the generated master key) stay unquoted, so `docker run --env-file` (the
model fetch, which does not parse quotes) reads them too. A value with a newline or a NUL is
refused: no env file can carry it to a container.

`read` turns such a file back into its values (the deploy's readiness probe, preflight and the
master key keep use it), and still reads files written before the quoting.
"""

from __future__ import annotations

import re

# Characters compose reads literally in an unquoted value.
_PLAIN = re.compile(r"[A-Za-z0-9_\-.,:/+=@~^]*")
# What quote() escapes inside double quotes: a backslash, a double quote, a dollar.
_ESCAPED = re.compile(r'\\([\\"])|\$\$')


class EnvValueError(ValueError):
    """A value no env file can carry to a container unchanged."""


def quote(value: object) -> str:
    """``value`` as the right-hand side of ``NAME=`` in an env file compose reads."""
    text = str(value)
    if "\n" in text or "\r" in text or "\x00" in text:
        raise EnvValueError("holds a line break or a NUL, which an env file cannot carry")
    if _PLAIN.fullmatch(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$")
    return f'"{escaped}"'


def _unquote(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return _ESCAPED.sub(lambda m: m.group(1) or "$", raw[1:-1])
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1]
    return raw.replace("$$", "$")


def read(text: str) -> dict[str, str]:
    """NAME -> value of every assignment in an env file's text (comments and blanks skipped)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, raw = stripped.partition("=")
        if sep:
            values[name.strip()] = _unquote(raw)
    return values
