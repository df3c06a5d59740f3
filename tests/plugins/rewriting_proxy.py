"""A hostile proxy in front of a server: forwards every request, and rewrites what comes back.

What a router between the kit and vLLM may do that the kit must notice: a LiteLLM-style
fallback answers from another model (`model` rewritten), a filter rewrites the content, a
gateway answers 503 for good while the server behind it is fine. Runs on its own event loop
in a background thread on 127.0.0.1, like the fault server, so a `sparkops batch run`
subprocess reaches it as any endpoint.

Fixture: `rewriting_proxy(upstream_url) -> RewritingProxy` (started; stopped after the test).
- `proxy.rewrite = fn(body: dict) -> dict`: applied to every JSON answer of a completion path
  (None: pass through). `fallback_model(name)` and `rewrite_content(text)` build common ones.
- `proxy.status = 503`: answer every completion request with that status, without forwarding
  (None: forward); with `proxy.status_after = N`, only once N completion requests have been
  forwarded (an outage that always comes mid-job). /v1/models, /metrics and the rest always
  pass through.
- `proxy.drop_fields = ("structured_outputs",)`: request fields taken out of every completion
  request before it is forwarded (a router that drops what it does not know); with
  `proxy.drop_after = N` only once N completion requests have arrived (a server
  restarted mid-job without its grammar back end), with `proxy.drop_every = K` only from every
  K-th request (a router that strips the field for some of its calls).
- `proxy.url`, `proxy.openai_url`; `proxy.forwarded` counts completion requests forwarded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.plugins.fault_server import COMPLETION_PATHS, ThreadedServer

Rewrite = Callable[[dict[str, Any]], dict[str, Any]]


def fallback_model(name: str) -> Rewrite:
    """A router's fallback: the answer names another model."""
    return lambda body: {**body, "model": name}


def rewrite_content(text: str | None) -> Rewrite:
    """A filter that replaces the first choice's content."""

    def rewrite(body: dict[str, Any]) -> dict[str, Any]:
        for choice in body.get("choices") or []:
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                choice["message"]["content"] = text
        return body

    return rewrite


class RewritingProxy(ThreadedServer):
    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.rewrite: Rewrite | None = None
        self.status: int | None = None
        self.status_after = 0
        self.drop_fields: tuple[str, ...] = ()
        self.drop_after = 0
        self.drop_every = 1
        self.arrived = 0  # completion requests received (drop_after and drop_every count them)
        self.dropped = 0  # completion requests forwarded without the drop_fields
        self.forwarded = 0
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> RewritingProxy:
        self._call(self._start())
        return self

    def close(self) -> None:
        self._call(self._stop())
        self._end_loop()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        completion = request.path in COMPLETION_PATHS
        if completion and self.status is not None and self.forwarded >= self.status_after:
            err = {"error": {"message": "proxy: upstream unavailable", "code": self.status}}
            return web.json_response(err, status=self.status)
        assert self._session is not None
        data = await request.read()
        if completion:
            self.arrived += 1
        if completion and self._drops():
            body = json.loads(data)
            data = json.dumps({k: v for k, v in body.items() if k not in self.drop_fields}).encode()
            self.dropped += 1
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASS}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=data, headers=headers
        ) as resp:
            raw = await resp.read()
            status, ctype = resp.status, resp.content_type
        if completion:
            self.forwarded += 1
            if self.rewrite is not None and status == 200:
                return web.json_response(self.rewrite(json.loads(raw)))
        return web.Response(body=raw, status=status, content_type=ctype)

    def _drops(self) -> bool:
        """Whether this completion request loses the drop_fields (see the module docstring)."""
        if not self.drop_fields or self.arrived <= self.drop_after:
            return False
        return (self.arrived - self.drop_after) % self.drop_every == 0


_PASS = {"content-type", "authorization", "connection"}


@pytest.fixture
def rewriting_proxy() -> Iterator[Callable[[str], RewritingProxy]]:
    """`rewriting_proxy(upstream_url) -> RewritingProxy` (started); all closed at the end."""
    proxies: list[RewritingProxy] = []

    def make(upstream: str) -> RewritingProxy:
        proxy = RewritingProxy(upstream).start()
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.close()
