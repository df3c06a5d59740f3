"""`sparkops pipeline check P.yaml [--endpoint URL]`: lint a pipeline for prefix reuse.

Without --endpoint: the structural checks (the YAML, its routes and prompt files, fixed text
after a record field, counted in characters), no server needed. With it: the server's own
/tokenize (real tokenizer and chat template) and its block size from /metrics, so the counts
are what vLLM will actually see, after checking the server serves the pipeline's `model:`;
and it sends the structured-output probe (pipeline/constrain.py) the job sends before its first
record, so a server that would ignore or reject the constraint is found here, before a job.

Exit status: 0 when checked, warnings included (a warning is advice about prefix reuse, not
a stopped job: the README's 1 means "stopped, resumable"); 2 for a pipeline or endpoint that
cannot be checked, and with --strict also for any warning (for scripts that gate on it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from sparkops import openai_http
from sparkops.errors import UserError
from sparkops.openai_http import ServerClient, normalise_base
from sparkops.pipeline import constrain
from sparkops.pipeline.check import probe_steps, structure
from sparkops.pipeline.spec import load_pipeline
from sparkops.urls import api_url


def register(subparsers: argparse._SubParsersAction) -> None:
    pipe = subparsers.add_parser("pipeline", help="work with pipeline YAML files")
    sub = pipe.add_subparsers(dest="pipeline_command", required=True)
    check = sub.add_parser(
        "check",
        help="check a pipeline; with --endpoint also count each step's shared prefix",
        description="Without --endpoint: the pipeline's structure (routes, prompt files, "
        "fixed text after a record field), no server needed. With --endpoint: token counts "
        "through the server's /tokenize and block size. Exit 0 with warnings printed; "
        "--strict makes a warning exit 2.",
    )
    check.add_argument("pipeline", type=Path, help="the pipeline YAML file to check")
    check.add_argument(
        "--endpoint",
        help="vLLM base URL, for token counts (/tokenize) and the block size (/metrics); "
        "without it only the structural checks run",
    )
    check.add_argument("--block-size", type=int, help="override the block size read from /metrics")
    check.add_argument(
        "--strict", action="store_true", help="exit 2 when there is any warning (default 0)"
    )
    check.add_argument("--json", action="store_true", help="print JSON instead of lines")
    check.set_defaults(func=_check)


async def check_pipeline(
    path: Path, endpoint: str, block_size: int | None = None
) -> dict[str, Any]:
    spec = load_pipeline(path)
    constrain.check_spec(spec)
    base = normalise_base(endpoint)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        client = ServerClient(session, timeout=constrain.PROBE_TIMEOUT_S)
        if block_size is None:
            metrics = api_url(base, "/metrics")
            text = await client.get_text(metrics)
            if text is None:
                raise UserError(f"cannot read {metrics}; start the server or pass --block-size N")
            block_size = openai_http.block_size(text)
            if block_size is None:
                raise UserError(
                    f"{metrics} has no vllm:cache_config_info block_size; pass --block-size N"
                )
        try:
            served = await client.served_models(base)
            if spec.model not in served:
                raise UserError(
                    f"model {spec.model!r} is not served at {base} (serving {served}); "
                    "fix 'model:' in the pipeline"
                )
            steps = await probe_steps(client, base, spec.model, spec.steps, block_size)
        except (aiohttp.ClientError, OSError) as err:
            raise UserError(
                f"cannot reach {api_url(base, '/tokenize')} ({type(err).__name__}); start the "
                "server"
            ) from None
        except TimeoutError:
            raise UserError(
                f"{api_url(base, '/tokenize')} did not answer within 60 s; check the server's log"
            ) from None
        except openai_http.AnswerError as err:
            raise UserError(f"{base}: {err}; point --endpoint at a vLLM server") from None
        await constrain.check_servers(client, [base], spec, source=str(path))
        budget = await constrain.server_budgets(client, base, spec)
    warnings = [w for s in steps for w in s.warnings]
    return {
        "pipeline": spec.name,
        "block_size": block_size,
        "steps": [
            {
                "step": s.step,
                "shared_tokens": s.shared_tokens,
                "reusable_tokens": s.reusable_tokens,
                "tail_tokens": s.tail_tokens,
                "fixed_tokens": s.fixed_tokens,
                "after_record_tokens": s.after_record_tokens,
                "constrained": constrain.step_mode(spec, spec.step(s.step)),
                "max_tokens": budget[s.step],
            }
            for s in steps
        ],
        "tail_tokens_total": sum(s.tail_tokens for s in steps),
        "warnings": warnings,
    }


def check_structure(path: Path) -> dict[str, Any]:
    """The server-less checks: the validated pipeline and each step's fixed text."""
    spec = load_pipeline(path)
    constrain.check_spec(spec)
    steps = structure(spec.steps)
    return {
        "pipeline": spec.name,
        "model": spec.model,
        "tokens_counted": False,
        "steps": [
            {
                "step": s.step,
                "fields": list(s.fields),
                "shared_chars": s.shared_chars,
                "after_record_chars": s.after_record_chars,
            }
            for s in steps
        ],
        "warnings": [w for s in steps for w in s.warnings],
    }


_MODES = {
    "choice": "held to the choices",
    "json": "held to the schema",
    "off": "free text (unconstrained)",
}


def _check(args: argparse.Namespace) -> int:
    if args.endpoint is None:
        result = check_structure(args.pipeline)
    else:
        result = asyncio.run(check_pipeline(args.pipeline, args.endpoint, args.block_size))
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.endpoint is None:
        print(f"pipeline {result['pipeline']}: valid (model {result['model']!r})")
        for s in result["steps"]:
            print(
                f"  {s['step']}: {s['shared_chars']:,} characters of shared text before the "
                f"record ({', '.join(s['fields'])}), {s['after_record_chars']:,} after it"
            )
        print(
            "  token counts and whole-block reuse need the server: add --endpoint URL "
            "(a vLLM server serving this model)"
        )
    else:
        print(f"pipeline {result['pipeline']}: block size {result['block_size']}")
        for s in result["steps"]:
            print(
                f"  {s['step']}: shared prefix {s['shared_tokens']} tokens, reusable "
                f"{s['reusable_tokens']} (whole blocks), tail recomputed every call "
                f"{s['tail_tokens']}, fixed text after the record {s['after_record_tokens']}; "
                f"answers {_MODES[s['constrained']]}, max_tokens {s['max_tokens']}"
            )
        print(f"  block-boundary tail over all steps: {result['tail_tokens_total']} tokens")
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr if args.json else sys.stdout)
    if result["warnings"] and args.strict:
        raise UserError(f"{len(result['warnings'])} warning(s) and --strict: fix them first")
    return 0
