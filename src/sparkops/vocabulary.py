"""The words the client, the job folder and the ops side share, in the one place all may import.

The batch client writes them, the job folder's readers read them back, and the Ansible
preflight (`doctor`, the filter plugins) judges a Spark by them. Kept in any one of those
packages, another had to copy it (the failure kinds were repeated as strings in
jobdir/openai_lines.py) or import a layer it must not (the preflight filter loaded the whole
client and aiohttp for one constant). This module imports nothing of the kit, so importing it
costs nothing and crosses no layer (the import contracts in pyproject.toml keep it so):

- `Kind`: what went wrong with one call attempt; the values are written to results lines
  and OpenAI error objects (batch/outcome.py decides them, docs/batch.md explains them);
- `DEFAULT_CONCURRENCY`: requests in flight when a job names none (`--concurrency`), which
  the preflight's KV-cache verdict also assumes;
- the capacity rule: a job's concurrency against the server's `--max-num-seqs`, said the
  same way by `sparkops batch` before a job and by preflight.yml before one is started.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

# Requests in flight when --concurrency is not given (batch/options.py's default, and the
# concurrency doctor/preflight.py judges the KV cache at unless the inventory names one).
DEFAULT_CONCURRENCY = 1000


class Kind(enum.Enum):
    """What went wrong with one attempt (the values are written to results lines)."""

    TRANSPORT = "transport"  # refused, reset, closed without an answer
    TIMEOUT = "timeout"  # --request-timeout passed
    HTTP_STATUS = "http_status"  # a non-200 answer; see Failure.code
    NO_TEXT = "no_text"  # a 200 without an answer in it (no choices, content null, tool call)
    MALFORMED_ANSWER = "malformed_answer"  # a 200 whose choice is not an object
    RECORD = "record"  # the request cannot be built from this record
    REROUTED = "rerouted"  # cancelled because its endpoint stalled: sent elsewhere, no attempt
    STALLED_ALONE = "stalled_alone"  # this record's call made no progress while others did
    UNFINISHED = "unfinished"  # a 200 whose answer did not finish (finish_reason abort, null)
    UNHELD = "unheld"  # a constrained step's answer outside its allowed set: not held


# ---- capacity: the job's concurrency against the server's --max-num-seqs -----------------


def max_num_seqs(stack: Mapping[str, Any] | None) -> int | None:
    """The server's `--max-num-seqs` from a stack record's vLLM command (the deploy's
    stack-record.json or the one `sparkops local up` writes), None when there is no record or
    its command does not set it: vLLM's default depends on its version and the hardware, so
    it is not guessed, and vLLM's /metrics does not publish it (`vllm:cache_config_info`
    carries the cache configuration, not the scheduler's)."""
    command = stack.get("command") if isinstance(stack, Mapping) else None
    if not isinstance(command, list):
        return None
    args = [str(a) for a in command]
    for i, arg in enumerate(args):
        if arg == "--max-num-seqs" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--max-num-seqs="):
            value = arg.partition("=")[2]
        else:
            continue
        try:
            seqs = int(value)
        except ValueError:
            return None
        return seqs if seqs > 0 else None
    return None


def capacity(
    stack: Mapping[str, Any] | None, concurrency: int, endpoints: int
) -> dict[str, Any] | None:
    """What the serving record keeps about capacity (None when --max-num-seqs is unknown):
    the server's limit, the job's concurrency, the calls one endpoint gets (the client
    spreads them evenly) and whether that is more than the server runs at once."""
    seqs = max_num_seqs(stack)
    if seqs is None:
        return None
    per_endpoint = -(-concurrency // max(1, endpoints))
    return {
        "max_num_seqs": seqs,
        "concurrency": concurrency,
        "per_endpoint": per_endpoint,
        "over": per_endpoint > seqs,
    }


def capacity_warning(cap: Mapping[str, Any] | None) -> str | None:
    """The sentence said before the job when its concurrency is above --max-num-seqs."""
    if not cap or not cap.get("over"):
        return None
    per, seqs = cap["per_endpoint"], cap["max_num_seqs"]
    spread = "" if per == cap["concurrency"] else f" ({per} per endpoint)"
    return (
        f"--concurrency {cap['concurrency']}{spread} is above the server's --max-num-seqs "
        f"{seqs}: about {per - seqs} requests at a time wait in the server's queue instead of "
        f"running (the report shows them as waiting requests); lower --concurrency to {seqs} "
        "or raise --max-num-seqs"
    )
