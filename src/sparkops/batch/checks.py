"""Check requests: one tiny real request that tells a record's problem from the server's.

Before the first record (`check_endpoints`), every distinct endpoint gets it: a 401/403/404/407
answers every record alike, so the job is refused (exit 2) naming the endpoint and the fix.

A failure of the server's kind (batch/outcome.py) is an outage unless the server answers
other work meanwhile. When the evidence is missing (the failing record is the only one left,
or every endpoint stalled with only a few calls in flight), the engine asks: the endpoint
gets the check request the job's pre-flight sends too (`CHECK_PATH`, `check_body`); if it
answers, the server is fine and the failing or hanging calls are the record's own.

Also here: which model answered. Each answer names its `model`; one other than the
pipeline's (a router's fallback) is reported once per model through the run's hooks (the
serving record's line, and a warning), and with --strict-serving stops the job.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from sparkops import openai_http
from sparkops.batch.endpoints import Endpoint
from sparkops.batch.outcome import (
    ENDPOINT_STATUS,
    Answer,
    Failure,
    classify_200,
    http_failure,
)
from sparkops.batch.stop_rules import Stop
from sparkops.errors import UserError
from sparkops.openai_http import ServerClient
from sparkops.privacy import redact

if TYPE_CHECKING:
    from sparkops.batch.endpoints import EndpointPool
    from sparkops.batch.hooks import RunHooks
    from sparkops.batch.stop_rules import NoAnswer
    from sparkops.batch.transport import Transport

CHECK_PATH = "/v1/chat/completions"
# The longest one check request may take before it counts as "the server does not answer".
CHECK_TIMEOUT_S = 10.0


def check_body(model: str | None) -> dict[str, Any]:
    """The smallest real request: one user word, one token back (no record in it)."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Reply with OK."}],
        "max_tokens": 1,
        "temperature": 0,
    }
    if model:
        body["model"] = model
    return body


def other_model_message(model: str, expected: str, strict: bool) -> str:
    """What the job says when an answer came from another model."""
    if strict:
        return (
            f"--strict-serving: an answer came from model {model!r}, not the pipeline's "
            f"{expected!r} (a router's fallback?); finished records are kept: fix the router "
            "and run the same command to resume, or run without --strict-serving to accept it"
        )
    return (
        f"answers came from model {model!r}, not the pipeline's {expected!r} (a router's "
        "fallback?); each step's `model` in results.jsonl says which one answered"
    )


@dataclass(frozen=True)
class Checks:
    """The engine's check requests and its watch on which model answered.

    transport: the engine's (its client's timeout bounds a check request too); check_model:
    the model the check request names; expected: the workload's (None for an OpenAI batch
    file, whose lines name their own: no answer is then another model's); hooks: the run's
    (another model is recorded and said there; --strict-serving stops the job)."""

    transport: Transport
    pool: EndpointPool
    no_answer: NoAnswer
    hooks: RunHooks
    check_model: str | None
    expected: str | None
    strict_model: bool = False
    other_models: set[str] = field(default_factory=set, init=False)

    @property
    def payload(self) -> bytes:
        """The check request's body (asked rarely: at a deadline, or when all endpoints
        stalled)."""
        return json.dumps(check_body(self.check_model)).encode()

    async def answers(self, ep: Endpoint, within: float = CHECK_TIMEOUT_S) -> bool:
        """Whether `ep` answers the check request within `within` seconds; a failure marks
        the job's no-answer rule as confirmed, so the job-level deadline can stop it."""
        timeout = min(within, self.transport.client.timeout)
        try:
            async with asyncio.timeout(timeout):
                outcome = await self.transport.attempt(ep, CHECK_PATH, self.payload, False)
        except TimeoutError:
            outcome = None
        if isinstance(outcome, Answer):
            self.no_answer.answered(self.pool.now())
            return True
        self.no_answer.check_unanswered()
        return False

    async def stalled_alone(self) -> bool:
        """Every endpoint stalled: those that answer a check request are not hung, and the
        calls in flight there are their records' own hang (cancelled as such). True when
        one answered (the job goes on)."""
        pool = self.pool
        assert pool.stalls is not None
        within = min(CHECK_TIMEOUT_S, pool.stalls.threshold)  # no slower than a stall window
        live = False
        for ep in pool.endpoints:
            if ep.stalled and await self.answers(ep, within):
                pool.cancel_alone(ep)
                live = True
        if live:
            pool.check()  # the check's answer is progress: the endpoint rejoins now
        return live

    def answered_by(self, model: str | None) -> bool:
        """An answer named `model`: report a model other than the pipeline's, once each.

        False when the answer must not be kept: with --strict-serving an answer from another
        model stops the job, and its record stays unfinished (a resume after the fix sends
        it again) instead of being journalled with the other model's decision."""
        expected = self.expected
        if model is None or expected is None or model == expected:
            return True
        strict = self.strict_model
        if model in self.other_models:
            return not strict
        self.other_models.add(model)
        self.hooks.other_model(model, expected)  # the serving record's line
        if strict:
            self.hooks.stop(Stop("model-changed", other_model_message(model, expected, True)))
        else:
            self.hooks.say(other_model_message(model, expected, False))
        return not strict


# ---- before the first record ------------------------------------------------------------
async def check_endpoints(client: ServerClient, bases: list[str], model: str | None) -> str | None:
    """Every endpoint, before the first record: /v1/models answers like an OpenAI server and
    serves the pipeline's `model`, and one real tiny request (batch/checks.py) is not refused
    as 401/403/404/407 (a wrong key, path or proxy login answers every record alike: a job
    spreading calls over it would fail its share of them). UserError (exit 2) naming the
    endpoint and the fix; other failures of the check request (a 5xx, a slow server) are
    left to the job's retry and stall rules. Each request waits the client's timeout at
    most. Returns the first endpoint's first model.
    """
    first: str | None = None
    for base in dict.fromkeys(bases):  # each distinct endpoint once
        names = await _served_models(client, base)
        if model is not None and model not in names:
            raise UserError(
                f"model {model!r} is not served at {redact(base)} (serving {names}); "
                "fix 'model:' in the pipeline"
            )
        if first is None and names:
            first = names[0]
        outcome = await _check_request(client, base, model or (names[0] if names else None))
        # A 404 to the chat check proves a wrong path only for a pipeline job (chat calls); an
        # OpenAI batch file may hold only other routes (embeddings on a pooling server).
        if (
            isinstance(outcome, Failure)
            and outcome.code in ENDPOINT_STATUS
            and (model is not None or outcome.code != 404)
        ):
            fix = (
                "check --api-key-env (the key it names is refused)"
                if outcome.code in (401, 403, 407)
                else "fix --endpoint (the path is wrong, or it serves no chat completions)"
            )
            raise UserError(
                f"endpoint {redact(base)} refused a check request with {outcome.message}; {fix} "
                "(nothing was sent)"
            )
    return first


async def _served_models(client: ServerClient, base: str) -> list[str]:
    name = redact(base)
    try:
        async with asyncio.timeout(client.timeout):
            return await client.served_models(base)
    except TimeoutError:
        raise UserError(
            f"{name}/v1/models did not answer within {client.timeout:.0f} s; check that "
            "the server is not hung (its log, /health) and that --endpoint is right"
        ) from None
    except openai_http.AnswerError as err:
        raise UserError(
            f"{name} does not answer like vLLM or LiteLLM: {err}; fix --endpoint"
        ) from None
    except (aiohttp.ClientError, OSError) as err:
        raise UserError(
            f"cannot reach {name}/v1/models ({type(err).__name__}); start the server "
            "(sparkops local up) or fix --endpoint"
        ) from None


async def _check_request(
    client: ServerClient, base: str, model: str | None
) -> Answer | Failure | None:
    """The check request's outcome; None when it could not be sent or took too long."""
    try:
        async with asyncio.timeout(client.timeout):
            async with client.post(base + CHECK_PATH, check_body(model)) as resp:
                raw = await resp.read()
                status = resp.status
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None
    body = _json_or_none(raw)
    if status == 200:
        return classify_200(CHECK_PATH, body, None, want_text=False)
    return http_failure(status, body, raw, None, None)


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
