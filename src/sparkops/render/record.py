"""The stack's own record (pure): what a deploy set up, for the batch job's serving record.

Rendered as stack-record.json next to compose.yml by every render (`sparkops render` and the
vllm_serving role alike, through `render_host`). A batch job keeps it in its serving.jsonl
with `sparkops batch run --stack-record PATH` (batch/serving.py), so a figure can be traced
to the profile, the image (and the base image's pinned digest) and the exact vLLM command
and environment that produced it.

It holds nothing that changes without the deployment changing (no time, no kit version), so
a re-deploy of the same stack leaves it, and the running server, untouched. Secrets never
enter it: they live in serving.env (0600), not in the service's environment,
and any variable whose name says token, key, secret or password is dropped besides.
"""

from __future__ import annotations

import json
from typing import Any

from sparkops.privacy import is_secret_name
from sparkops.render.stack import HostStack

STACK_RECORD = "stack-record.json"


def stack_record(stack: HostStack) -> dict[str, Any]:
    """One host's record: profile, model, image and digest, command, environment (no secrets)."""
    serving = stack.serving
    env = {k: v for k, v in sorted(stack.vllm["env"].items()) if not is_secret_name(k)}
    return {
        "host": stack.host,
        "role": stack.role,
        "profile": stack.profile.name,
        "model": serving.model_dir or stack.profile.model,
        "served_model_name": stack.profile.served_model_name,
        "image": stack.vllm["image"],
        "base_image": serving.base_image or None,
        "base_digest": serving.base_digest or None,
        "command": list(stack.vllm["command"]),
        "env": env,
    }


def stack_record_json(stack: HostStack) -> str:
    return json.dumps(stack_record(stack), indent=2, sort_keys=True) + "\n"
