"""Where `sparkops plan` finds a model: a Hugging Face config.json (and the weights beside
it) or a kit profile's shipped shape; and how a plan reaches stdout (JSON or the table).

Shared by the plan commands (plan/cli.py, plan/memory_command.py, plan/guard_command.py) so
none of them imports another.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from sparkops.console import stdout_console
from sparkops.errors import UserError
from sparkops.inputs import read_json
from sparkops.plan.memory import GB
from sparkops.plan.shapes import ModelShape, kv_dtype_of, profile_shape, shape_from_config

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def load_config(path: Path) -> tuple[dict[str, Any], Path]:
    """Read config.json (given directly or as its model folder)."""
    file = path / "config.json" if path.is_dir() else path
    data = read_json(file, what="model config", fix="pass the model's config.json")
    return data, file.parent


def weights_gb_beside(folder: Path) -> float:
    """Size of the weight files in a model folder, in GB."""
    total = sum(
        f.stat().st_size for f in folder.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES
    )
    if not total:
        raise UserError(
            f"no weight files beside the config in {folder}: pass --weights-gb "
            "(e.g. 16 for an 8B model in BF16, 8.5 in FP8)"
        )
    return total / GB


def model_source(args: argparse.Namespace) -> tuple[ModelShape, str, int | None]:
    """The shape, KV dtype and KV cache bytes from --profile or --config (+ --weights-gb)."""
    if args.profile is not None:
        shape, profile = profile_shape(args.profile)
        kv_dtype = args.kv_dtype or kv_dtype_of(profile)
        if args.weights_gb is not None:
            shape = shape.model_copy(update={"weights_gb": args.weights_gb})
        return shape, kv_dtype, profile.vllm.kv_cache_memory_bytes
    config, folder = load_config(args.config)
    weights = args.weights_gb
    if weights is None:
        try:
            weights = weights_gb_beside(folder)
        except UserError:
            weights = None
    return shape_from_config(config, weights), args.kv_dtype or "fp8", None


def show(plan: Any, table: Callable[[Any, Console], None], *, as_json: bool) -> int:
    """One plan to stdout: its as_dict() as JSON for scripts, else the readable table."""
    if as_json:
        print(json.dumps(plan.as_dict(), indent=2))
    else:
        table(plan, stdout_console())
    return 0
