"""An in-process aiohttp responder: one test-written handler on a free 127.0.0.1 port.

Most tests that need an OpenAI-shaped server use the fault server (fault_server.py: scripted
statuses, drops, hangs, per-record counts). A few unit tests must observe something the fault
server does not record (which pipeline step each concurrent call belongs to, which connection
it came on); they write that handler themselves and serve it here, in their own event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from tests.plugins.fault_server import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(handler: Handler, path: str = "/v1/chat/completions") -> AsyncIterator[str]:
    """Serve POST ``path`` with ``handler`` while the block runs; yields the base URL."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
