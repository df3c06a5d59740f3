"""Answers held on the server: each step's structured-output constraint and answer budget.

A choice step (`parse: {choices: [...]}`) is constrained by default: its request carries vLLM's
structured-output field `structured_outputs: {"choice": [...]}`, so the model can write only
one of the choices (as written, or in lower, capitalised or upper case: pipeline/parse.py
matches the answer whole against exactly those forms), and `max_tokens` (unless the step sets
it) fits the longest such answer plus the end token, counted in bytes as well as in the
tokenizer's tokens: a grammar may make the model spell a word in more tokens than the
tokenizer's own split ("oui" as o-u-i: every answer of `[oui, non]` was cut off at a
tokenizer-derived budget of 3). An extraction step (`extract:`) carries
`structured_outputs: {"json": schema}` with whitespace off, and room for the longest answer the
schema allows. `constrain: false` (on the pipeline or a step) sends the old free-text request.

vLLM documents this request form since 0.10.2 (`guided_choice`/`guided_json`, deprecated then,
were removed in 0.12.0); the kit serves vLLM 0.32 (versions.env). A server or router that does
not know the field may drop it silently, and then the constraint is not there at all: so
before any record is sent, `check_servers` asks every endpoint once with a constraint that no
free answer meets (one choice, a word the prompt does not ask for) and refuses the job with one
line and the fix when the answer breaks it or the server rejects the field. A probe answered
with no verdict (a 5xx, a timeout) is asked again; if it still cannot tell, the job says so
and goes on, and every answer is checked against its step's allowed forms anyway
(batch/workload.py): a server that stops holding the constraint after the probe is caught
there, answer by answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from sparkops.errors import UserError
from sparkops.openai_http import ServerClient
from sparkops.pipeline.extract import JSON_MARGIN as JSON_MARGIN
from sparkops.pipeline.extract import longest_instance as longest_instance
from sparkops.pipeline.kinds import Count, Mode
from sparkops.pipeline.kinds import byte_count as byte_count
from sparkops.pipeline.parse import allowed_answers as allowed_answers
from sparkops.pipeline.spec import PipelineSpec, StepSpec
from sparkops.urls import api_url

# The probe: a single allowed answer the prompt does not ask for. A server that holds the
# constraint answers exactly it; one that ignores the field answers the prompt.
PROBE_WORD = "kumquat"
PROBE_MESSAGES = [{"role": "user", "content": "Say hello."}]
PROBE_SCHEMA = {
    "type": "object",
    "properties": {"fruit": {"type": "string", "enum": [PROBE_WORD]}},
    "required": ["fruit"],
    "additionalProperties": False,
}
# How long one /tokenize call may take when `sparkops pipeline check` asks (a job's client
# carries its pre-flight bound), and one probe at least: the server compiles the probe's
# grammar first, and a CPU server shared with other work has taken over 30 s to answer it.
PROBE_TIMEOUT_S = 120.0
# Room a free answer to the probe gets (enough to show what the server wrote instead).
PROBE_MAX_TOKENS = {"choice": 8, "json": 24}


def step_mode(spec: PipelineSpec, step: StepSpec) -> Mode:
    """How `step`'s answers are held: to a list of answers, to a schema, or not at all."""
    return step.answer.held_mode if spec.constrained(step) else "off"


def modes(spec: PipelineSpec) -> dict[str, Mode]:
    """Every step's mode, in order: what the manifest and the serving record keep."""
    return {step.name: step_mode(spec, step) for step in spec.steps}


def structured_outputs(spec: PipelineSpec, step: StepSpec) -> dict[str, Any] | None:
    """The request's `structured_outputs` field for `step` (None when unconstrained)."""
    return step.answer.constraint() if spec.constrained(step) else None


def max_tokens(spec: PipelineSpec, step: StepSpec, count: Count) -> int:
    """The step's answer budget: its own `max_tokens`, else what its kind derives from what
    it may answer (`count` gives a text's token count: the server's tokenizer, or
    `byte_count`)."""
    if step.max_tokens is not None:
        return step.max_tokens
    return step.answer.budget(count, spec.constrained(step), step.name)


def check_spec(spec: PipelineSpec) -> None:
    """Refuse what no request can send: a step whose budget cannot be derived."""
    for step in spec.steps:
        max_tokens(spec, step, byte_count)


def budgets(spec: PipelineSpec, count: Callable[[str], int] = byte_count) -> dict[str, int]:
    """Every step's max_tokens."""
    return {step.name: max_tokens(spec, step, count) for step in spec.steps}


def describe(spec: PipelineSpec, budget: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """What the serving record keeps per step: the mode and the answer budget sent."""
    return {
        name: {"mode": mode, "max_tokens": budget.get(name)} for name, mode in modes(spec).items()
    }


# ---- asking the server --------------------------------------------------------------------
async def token_counts(
    client: ServerClient, base: str, model: str, texts: list[str]
) -> dict[str, int]:
    """Each text's token count through the server's /tokenize (no special tokens), each call
    bounded by the client's timeout; the texts it could not count (a router has no /tokenize)
    are left out."""
    counts: dict[str, int] = {}
    for text in dict.fromkeys(texts):
        body = {"model": model, "prompt": text, "add_special_tokens": False}
        try:
            async with (
                asyncio.timeout(client.timeout),
                client.post(api_url(base, "/tokenize"), body) as resp,
            ):
                data = await resp.json(content_type=None)
                ok = resp.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return counts
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not ok or not isinstance(tokens, list):
            return counts
        counts[text] = len(tokens)
    return counts


def _answer_texts(spec: PipelineSpec) -> list[str]:
    """The texts whose token counts the derived budgets read."""
    texts: list[str] = []
    for step in spec.steps:
        if step.max_tokens is None and step_mode(spec, step) != "off":
            texts.extend(step.answer.budget_texts())
    return texts


async def server_budgets(client: ServerClient, base: str, spec: PipelineSpec) -> dict[str, int]:
    """Every step's max_tokens, counted with the server's tokenizer where it has one (else
    the byte bound)."""
    counts = await token_counts(client, base, spec.model, _answer_texts(spec))
    return budgets(spec, lambda text: counts.get(text, byte_count(text)))


def probe_body(model: str, mode: Mode) -> dict[str, Any]:
    """The probe request for one kind of constraint."""
    outputs: dict[str, Any] = (
        {"choice": [PROBE_WORD]} if mode == "choice" else {"json": PROBE_SCHEMA}
    )
    return {
        "model": model,
        "messages": PROBE_MESSAGES,
        "max_tokens": PROBE_MAX_TOKENS[mode],
        "temperature": 0,
        "structured_outputs": outputs,
    }


# The statuses that say the request itself was refused (the field, or its content).
REJECTED = (400, 422)


def probe_tells(status: int, data: Any) -> bool:
    """Whether a probe's answer can give a verdict: a refusal of the field, or an answer with
    text (`probe_verdict` reads which)."""
    if status in REJECTED:
        return True
    try:
        text = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return False
    return status == 200 and isinstance(text, str) and bool(text)


def probe_verdict(mode: Mode, status: int, data: Any) -> str | None:
    """What is wrong with a probe's answer; None when the constraint held, or when the answer
    cannot tell (a 5xx, an answer without text: an outage or a filter, which the job's own
    rules meet on the records' calls, retried and then stopped with their own message)."""
    if status in REJECTED:
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else error or data
        return f"rejected the structured-output constraint (HTTP {status}: {str(message)[:160]})"
    if not probe_tells(status, data):
        return None
    text = data["choices"][0]["message"]["content"]
    cut = data["choices"][0].get("finish_reason") == "length"
    held = text == PROBE_WORD if mode == "choice" else _json_probe_ok(text, cut)
    if held:
        return None
    asked = (
        f"asked to answer only {PROBE_WORD!r}"
        if mode == "choice"
        else f'asked for {{"fruit": "{PROBE_WORD}"}}'
    )
    return f"ignored the structured-output constraint ({asked}, it wrote {text[:40]!r})"


_PROBE_OBJECT = json.dumps({"fruit": PROBE_WORD}, separators=(",", ":"))


def _json_probe_ok(text: str, cut: bool) -> bool:
    """The one object the probe's schema allows; or, cut off at max_tokens, the start of it.
    A grammar allows whitespace between JSON tokens, and a weak model (the kit's random tiny
    one) may spend its budget there: `{  "fruit"` then blank lines is the constraint held, not
    ignored. A free answer ("Hello! ...") is neither."""
    try:
        if json.loads(text) == {"fruit": PROBE_WORD}:
            return True
    except ValueError:
        pass
    return cut and _PROBE_OBJECT.startswith("".join(text.split()))


# A probe whose answer cannot tell (a 5xx, a timeout, no text) is asked this often in all,
# waiting PROBE_RETRY_S times the attempt between: one 503 must not switch the check off.
PROBE_ATTEMPTS = 3
PROBE_RETRY_S = 2.0


async def probe(client: ServerClient, base: str, model: str, mode: Mode) -> str | None:
    """Ask `base` with a `mode` constraint; what is wrong (None: it held, or no answer could
    tell in PROBE_ATTEMPTS tries: said as a warning, and every answer of the job is checked
    against its allowed forms instead). Each try waits the client's timeout, and at least
    PROBE_TIMEOUT_S (the server compiles the grammar first)."""
    timeout = max(client.timeout, PROBE_TIMEOUT_S)
    why = "no answer"
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        try:
            async with (
                asyncio.timeout(timeout),
                client.post(api_url(base, "/v1/chat/completions"), probe_body(model, mode)) as resp,
            ):
                try:
                    data = await resp.json(content_type=None)
                except (ValueError, UnicodeDecodeError):
                    data = None
                if probe_tells(resp.status, data):
                    return probe_verdict(mode, resp.status, data)
                why = f"HTTP {resp.status}" if resp.status != 200 else "an answer without text"
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            why = (
                f"no answer within {timeout:.0f} s"
                if isinstance(err, TimeoutError)
                else (type(err).__name__)
            )
        if attempt < PROBE_ATTEMPTS:
            await asyncio.sleep(PROBE_RETRY_S * attempt)
    print(
        f"sparkops: warning: {base} gave no answer that tells whether it holds the "
        f"structured-output constraint ({PROBE_ATTEMPTS} tries, last: {why}), so it was not "
        "checked before the job; every answer is checked against its step's allowed answers "
        "instead, and one outside them is sent again, never taken as a decision",
        file=sys.stderr,
    )
    return None


async def check_servers(
    client: ServerClient, bases: list[str], spec: PipelineSpec, source: str = "the pipeline"
) -> None:
    """Refuse (UserError, one line) a job whose constrained steps an endpoint would not hold."""
    kinds = sorted({m for m in modes(spec).values() if m != "off"})
    for base in dict.fromkeys(bases):
        for mode in kinds:
            problem = await probe(client, base, spec.model, mode)
            if problem is not None:
                steps = [n for n, m in modes(spec).items() if m == mode]
                raise UserError(refusal(base, problem, steps, source))


def refusal(base: str, problem: str, steps: list[str], source: str) -> str:
    """The one line a server that will not hold the constraint gets (nothing was sent)."""
    return (
        f"{base} {problem}, so step(s) {', '.join(steps)} would not be held to their answers; "
        "serve the model with the kit's vLLM (it reads `structured_outputs`), or through a "
        f"router that passes that field on, or set `constrain: false` in {source} to run "
        "unconstrained (nothing was sent)"
    )
