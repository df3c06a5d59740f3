"""What the kit asks a vLLM (or any OpenAI-compatible) server besides completions: /metrics,
/tokenize, /v1/models and /version, and how an endpoint URL is spelt. Every such request goes
through a `ServerClient` (the session, the auth headers and the checks' timeout, one object).

Thin I/O edge below both `batch` (the job client) and `pipeline` (`pipeline check`), so
neither borrows the other's HTTP code; the parsing of the Prometheus text is
`sparkops.metrics.scrape`'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from sparkops.errors import UserError
from sparkops.metrics.scrape import info_labels, parse_metrics
from sparkops.metrics.timeline import COUNTERS, GAUGES
from sparkops.privacy import redact
from sparkops.urls import api_url, server_root

# Routes the kit appends to a base URL: an endpoint ending in one would get it twice.
API_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/embeddings", "/metrics")


def normalise_base(url: str) -> str:
    """`http://h:8000/v1/` and `http://h:8000` both mean base `http://h:8000`; a query string
    stays (`http://h:8000/v1?x=1` -> `http://h:8000?x=1`: `urls.api_url` keeps it at the end
    of every route), a fragment is dropped (it is never sent).

    A URL without http:// or https:// (`localhost:8000`) is refused with the fix: sent as
    is, it fails as "cannot connect", which sends the user to start a server that is up. So is
    one ending in a route the kit appends (`.../v1/chat/completions`, copied from a curl line):
    every call would 404 as if the server were wrong.
    """
    url = url.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.split("/")[0]:
        fix = f"http://{url}" if not sep and url else "http://HOST:8000"
        raise UserError(f"--endpoint {url!r} is not an http:// or https:// URL; write it as {fix}")
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    for route in API_ROUTES:
        if path.lower().endswith(route):
            base = urlunsplit(parts._replace(path=path[: -len(route)], fragment=""))
            raise UserError(
                f"--endpoint {redact(url)} names an API route ({route}); the kit appends the "
                f"routes itself: give the server's base URL, {redact(base)}"
            )
    return server_root(url)


def metric_values(text: str) -> dict[str, float]:
    """The timeline values of one /metrics page (only those the server exposed)."""
    snap = parse_metrics(text)
    return {key: float(getattr(snap, key)) for key in (*COUNTERS, *GAUGES) if key in snap.found}


def block_size(text: str) -> int | None:
    """`block_size` label of vllm:cache_config_info (an info gauge scrape.py does not carry)."""
    value = info_labels(text, "vllm:cache_config").get("block_size", "")
    return int(value) if value.isdigit() else None


class AnswerError(ValueError):
    """A server answered, but not as vLLM / an OpenAI-compatible server does."""


class NoAnswer(Exception):
    """No usable answer this time (refused, timed out, 5xx): try again later, assume nothing."""


# How long one of the kit's own checks waits for its answer unless the caller says.
CHECK_TIMEOUT_S = 60.0


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The headers that carry the API key (none without one): the one place they are spelt."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True)
class ServerClient:
    """How the kit talks to its servers: one aiohttp session, the auth headers every request
    carries, and how long one of its checks may wait (the kit's counterpart of GuideLLM's
    `Backend`). A job holds two: the side client (pre-flight, /metrics samples, identity
    probes) and the engine's pooled one for the records' calls (batch/transport.py).

    Why one object: the session, the headers and the timeout always travel together; passed
    apart, each function took three arguments for one idea and a caller could pair a session
    with the wrong headers. The base URL is per call: one client serves every endpoint of a
    job. `timeout` bounds the checks that time themselves (the pre-flight, the structured-
    output probe, /tokenize counts); the session's own limit covers every request as well.
    """

    session: aiohttp.ClientSession
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = CHECK_TIMEOUT_S

    def get(self, url: str) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """A GET with the client's headers (`async with client.get(url) as resp`)."""
        return self.session.get(url, headers=self.headers)

    def post(
        self,
        url: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """A POST of `body` as JSON (or `data`, bytes already encoded) with the client's
        headers, or with `headers` where the caller builds its own from them (the records'
        transport adds the content type and connection recycling)."""
        sent = self.headers if headers is None else headers
        if data is not None:
            return self.session.post(url, data=data, headers=sent)
        return self.session.post(url, json=body, headers=sent)

    async def get_text(self, url: str) -> str | None:
        """The body of a GET answered 200; None for anything else (down, refused, an error)."""
        try:
            async with self.get(url) as resp:
                if resp.status != 200:
                    return None
                return await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def get_raw(self, url: str) -> tuple[int, str]:
        """Status and text of a GET; NoAnswer when the server did not answer or failed (5xx).

        A 4xx is an answer ("this server has no such page": LiteLLM has no /version), which
        the serving record keeps apart from a server that is down, so an outage never reads
        as drift.
        """
        try:
            async with self.get(url) as resp:
                text = await resp.text()
                if resp.status >= 500:
                    raise NoAnswer(f"HTTP {resp.status}")
                return resp.status, text
        except (aiohttp.ClientError, OSError, TimeoutError, UnicodeDecodeError) as err:
            raise NoAnswer(type(err).__name__) from None

    async def tokenize(self, base: str, model: str, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of a chat prompt exactly as the server will build it (chat template
        applied).

        Raises AnswerError for an HTTP error or an answer of another shape (a proxy, an older
        server): the prefix analysis is optional, so the caller degrades instead of crashing.
        """
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        async with self.post(api_url(base, "/tokenize"), body) as resp:
            data = await _json(resp, "/tokenize")
            if resp.status != 200:
                raise AnswerError(f"/tokenize answered HTTP {resp.status}: {str(data)[:200]}")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            raise AnswerError(f"/tokenize answered {_shape(data)}, not {{'tokens': [int, ...]}}")
        return tokens

    async def served_models(self, base: str) -> list[str]:
        """Names of the served models; AnswerError when the answer is not an OpenAI model
        list."""
        async with self.get(api_url(base, "/v1/models")) as resp:
            data = await _json(resp, "/v1/models")
            if resp.status != 200:
                hint = "; check --api-key-env" if resp.status in (401, 403) else ""
                raise AnswerError(f"/v1/models answered HTTP {resp.status}{hint}")
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list) or not all(
            isinstance(m, dict) and isinstance(m.get("id"), str) for m in models
        ):
            raise AnswerError(
                f"/v1/models answered {_shape(data)}, not an OpenAI model list "
                "({'data': [{'id': ...}]})"
            )
        return [m["id"] for m in models]


async def _json(resp: aiohttp.ClientResponse, what: str) -> Any:
    try:
        return await resp.json(content_type=None)
    except (ValueError, UnicodeDecodeError):
        raise AnswerError(
            f"{what} answered HTTP {resp.status} with a body that is not JSON"
        ) from None


def _shape(data: Any) -> str:
    """A short description of what came back (never its content: it may echo a prompt)."""
    if isinstance(data, dict):
        keys = ", ".join(sorted(map(str, data))[:5])
        return f"a JSON object with keys [{keys}]"
    return f"a JSON {type(data).__name__}".replace("NoneType", "null")
