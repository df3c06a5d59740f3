"""`sparkops pipeline check P.yaml --endpoint URL`: lint a pipeline for prefix reuse, and
check that the server holds its constrained steps to their answers.

Uses the server's own /tokenize (real tokenizer and chat template) and its block size from
/metrics, so the counts are what vLLM will actually see; and sends the structured-output probe
(pipeline/constrain.py) the job sends before its first record, so a server that would ignore
or reject the constraint is found here, before a job.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from sparkops import openai_http
from sparkops.errors import UserError
from sparkops.openai_http import normalise_base
from sparkops.pipeline import constrain
from sparkops.pipeline.check import analyse_step, probe_records
from sparkops.pipeline.prompt import build_messages
from sparkops.pipeline.spec import load_pipeline


def register(subparsers: argparse._SubParsersAction) -> None:
    pipe = subparsers.add_parser("pipeline", help="work with pipeline YAML files")
    sub = pipe.add_subparsers(dest="pipeline_command", required=True)
    check = sub.add_parser("check", help="count each step's shared prefix and flag reuse problems")
    check.add_argument("pipeline", type=Path)
    check.add_argument(
        "--endpoint", required=True, help="vLLM base URL (for /tokenize and block size)"
    )
    check.add_argument("--block-size", type=int, help="override the block size read from /metrics")
    check.add_argument("--json", action="store_true")
    check.set_defaults(func=_check)


async def check_pipeline(
    path: Path, endpoint: str, block_size: int | None = None
) -> dict[str, Any]:
    spec = load_pipeline(path)
    constrain.check_spec(spec)
    base = normalise_base(endpoint)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        if block_size is None:
            text = await openai_http.get_text(session, base + "/metrics", {})
            if text is None:
                raise UserError(
                    f"cannot read {base}/metrics; start the server or pass --block-size N"
                )
            block_size = openai_http.block_size(text)
            if block_size is None:
                raise UserError(
                    f"{base}/metrics has no vllm:cache_config_info block_size; pass --block-size N"
                )
        steps = []
        try:
            for step in spec.steps:
                toks = [
                    await openai_http.tokenize(
                        session, base, spec.model, build_messages(step, r), {}
                    )
                    for r in probe_records(step)
                ]
                steps.append(analyse_step(step, toks[0], toks[1], toks[2], block_size=block_size))
        except (aiohttp.ClientError, OSError) as err:
            raise UserError(
                f"cannot reach {base}/tokenize ({type(err).__name__}); start the server"
            ) from None
        except TimeoutError:
            raise UserError(
                f"{base}/tokenize did not answer within 60 s; check the server's log"
            ) from None
        except openai_http.AnswerError as err:
            raise UserError(f"{base}: {err}; point --endpoint at a vLLM server") from None
        await constrain.check_servers(session, [base], spec, {}, source=str(path))
        budget = await constrain.server_budgets(session, base, spec, {})
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


_MODES = {
    "choice": "held to the choices",
    "json": "held to the schema",
    "off": "free text (unconstrained)",
}


def _check(args: argparse.Namespace) -> int:
    result = asyncio.run(check_pipeline(args.pipeline, args.endpoint, args.block_size))
    if args.json:
        print(json.dumps(result, indent=2))
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
            print(f"warning: {w}")
    return 1 if result["warnings"] else 0
