"""A minimal local OpenAI-style chat responder for client benchmarks.

Answers every POST /v1/chat/completions with a fixed body, so what a benchmark measures is the
client's own cost. Run in its own process (its CPU must not count as the client's):
`python benchmarks/client_responder.py PORT [--hold-ms MS] [--step-ms MS] [--vllm-body]`.

`--hold-ms` keeps each answer back that long (a server busy generating: 1,000 calls in flight
finish in waves, not one by one), `--vllm-body` answers with the fields vLLM 0.26 sends (a
larger body to decode); together they stand in for a real server's shape, not its speed.
`--step-ms` answers at the next multiple of MS since the responder started, all at once: the
bursts of an engine step (vLLM finishes every one-token call scheduled in a step together).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiohttp import web

BODY = (
    b'{"id":"cmpl-bench","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"no"},"finish_reason":"stop"}],"usage":'
    b'{"prompt_tokens":100,"completion_tokens":1,"total_tokens":101,'
    b'"prompt_tokens_details":{"cached_tokens":64}}}'
)
# The shape of a vLLM 0.26 chat completion (its null fields included).
VLLM_BODY = (
    b'{"id":"chatcmpl-9f1c2d3e4b5a69788796a5b4c3d2e1f0","object":"chat.completion",'
    b'"created":1764633600,"model":"tiny","choices":[{"index":0,"message":{"role":"assistant",'
    b'"content":"no","refusal":null,"annotations":null,"audio":null,"function_call":null,'
    b'"tool_calls":[],"reasoning_content":null},"logprobs":null,"finish_reason":"length",'
    b'"stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,'
    b'"usage":{"prompt_tokens":100,"total_tokens":101,"completion_tokens":1,'
    b'"prompt_tokens_details":{"cached_tokens":64}},"prompt_logprobs":null,'
    b'"prompt_token_ids":null,"kv_transfer_params":null}'
)


def app(hold_s: float, body: bytes, step_s: float = 0.0) -> web.Application:
    start = time.monotonic()

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        if hold_s:
            await asyncio.sleep(hold_s)
        if step_s:  # wait for the next step boundary: every call due then answers together
            await asyncio.sleep(step_s - (time.monotonic() - start) % step_s)
        return web.Response(body=body, content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tiny"}]})

    application = web.Application()
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_get("/v1/models", models)
    return application


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--hold-ms", type=float, default=0.0)
    ap.add_argument("--step-ms", type=float, default=0.0)
    ap.add_argument("--vllm-body", action="store_true")
    args = ap.parse_args()
    web.run_app(
        app(args.hold_ms / 1000, VLLM_BODY if args.vllm_body else BODY, args.step_ms / 1000),
        host="127.0.0.1",
        port=args.port,
        print=None,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
