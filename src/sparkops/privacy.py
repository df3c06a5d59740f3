"""The privacy environment: every process the kit starts reports nothing and fetches nothing.

One definition for every reader, so a variable added here reaches them all: the rendered
stacks (vLLM, LiteLLM router, Ray; the templates get it through the render context), the
local vLLM-CPU servers (`sparkops local up`, the demo, the tests' server fixtures) and the
tests that start vLLM themselves. The records are patient data, so the default is "nothing
leaves the host": each library's usage reporting is switched off by its own documented
variable, and the set is the union of what each process reads (an unused variable is
harmless to the others).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TextIO

# Usage statistics and telemetry, one variable per library that phones home.
TELEMETRY_OFF: dict[str, str] = {
    "VLLM_NO_USAGE_STATS": "1",  # vLLM's usage stats
    "DO_NOT_TRACK": "1",  # the cross-tool convention (vLLM, Hugging Face, others)
    "HF_HUB_DISABLE_TELEMETRY": "1",  # huggingface_hub
    "RAY_USAGE_STATS_ENABLED": "0",  # Ray's cluster usage report
    "LITELLM_TELEMETRY": "False",  # LiteLLM proxy
    # LiteLLM downloads its model cost map from the internet at start-up unless told not to.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}

# Hub access: on whenever the weights are already on the host, so nothing is fetched.
HUB_OFFLINE_KEYS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def private_env(*, offline: bool = True) -> dict[str, str]:
    """TELEMETRY_OFF plus the hub switches: `offline=False` only where the weights are to be
    downloaded by name (a deployment without `vllm_serving_model_dir`)."""
    flag = "1" if offline else "0"
    return {**TELEMETRY_OFF, **dict.fromkeys(HUB_OFFLINE_KEYS, flag)}


# A variable, key or query parameter whose name says it holds a secret: left out of every
# record the kit writes (the deploy's stack-record.json, a job's serving.jsonl) and redacted
# in every URL it prints. Two kinds of word: those that say "secret" wherever they stand in a
# name (`api_key`, `X-Amz-Signature`, `client_secret`), and short ones that say it only as a
# whole part of the name (`sig`, `auth`, `pass`, `jwt`, `code`: as bare substrings they are in
# harmless names such as design, author, bypass or barcode).
SECRET_WORDS = ("token", "key", "secret", "password", "passwd", "credential", "signature")
SECRET_PARTS = frozenset({"sig", "auth", "authorization", "pass", "pwd", "jwt", "code"})
SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# A name's parts: split at anything not a letter or digit, and where a lower case letter or a
# digit meets an upper case one (`authCode` -> auth, Code).
_NAME_PARTS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def is_secret_name(name: str) -> bool:
    """True when `name` says it holds a secret: it contains one of SECRET_WORDS (token, key,
    secret, password, signature...), or one of its parts is one of SECRET_PARTS (sig, auth,
    pass, jwt, code...)."""
    if SECRET_NAME.search(name) is not None:
        return True
    return any(part.lower() in SECRET_PARTS for part in _NAME_PARTS.split(name))


# A URL's user information (`scheme://user:password@`): a password or a token some
# deployments put in the endpoint URL. The kit uses it for its requests and never shows it.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#'\"]*@")
# A query (or fragment) parameter: its name and its value. Redacted when `is_secret_name`
# says the name holds a secret (`?api_key=...`, `&sig=...`, `#access_token=...`).
_PARAMETER = re.compile(r"([?&;#])([^=?&;#\s'\"]*)=([^&;#\s'\"]*)")
REDACTED = "***"


def has_credentials(url: str) -> bool:
    """True when `url` carries user information (`scheme://user:password@host`)."""
    return _USERINFO.match(url.strip()) is not None


def redact(text: str) -> str:
    """`text` (a URL, or a message, a line or a file quoting URLs) with every URL's
    credentials replaced by ***: `http://user:pass@host/v1` -> `http://***@host/v1`,
    `?api_key=abc` -> `?api_key=***` (and `sig=`, `auth=`, `code=`...: every parameter whose
    name `is_secret_name`). The one redaction every file the kit writes about an endpoint and
    every message it prints goes through; cheap when there is nothing to hide."""
    if "://" not in text:
        return text
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    if "=" in text:
        text = _PARAMETER.sub(_redact_parameter, text)
    return text


def _redact_parameter(match: re.Match[str]) -> str:
    """One `name=value` of a query or fragment, its value hidden when the name says secret."""
    lead, name, value = match.groups()
    if value and is_secret_name(name):
        value = REDACTED
    return f"{lead}{name}={value}"


@dataclass(frozen=True, eq=False)
class RedactingStream:
    """A text stream (stderr) whose every write goes through `redact`: whatever part of the
    kit prints a message naming an endpoint, its credentials do not reach the terminal or
    the journal. Everything else (isatty, fileno, flush, encoding) is the stream's own."""

    _stream: TextIO

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
