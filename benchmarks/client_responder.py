"""A minimal local OpenAI-style chat responder for client benchmarks.

Answers every POST /v1/chat/completions at once with a fixed small body, so what a benchmark
measures is the client's own cost. Run in its own process (its CPU must not count as the
client's): `python benchmarks/client_responder.py PORT`.
"""

from __future__ import annotations

import sys

from aiohttp import web

BODY = (
    b'{"id":"cmpl-bench","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"no"},"finish_reason":"stop"}],"usage":'
    b'{"prompt_tokens":100,"completion_tokens":1,"total_tokens":101,'
    b'"prompt_tokens_details":{"cached_tokens":64}}}'
)


async def chat(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=BODY, content_type="application/json")


async def models(request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "tiny"}]})


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, backlog=4096)


if __name__ == "__main__":
    main()
