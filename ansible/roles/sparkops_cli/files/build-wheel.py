"""Build the kit's wheel on the controller (run by the sparkops_cli role, not copied to hosts).

Usage: build-wheel.py SOURCE_DIR OUT_DIR  ->  prints the wheel's path.

The sources are copied to a temporary folder first, so the build's own folders (build/,
*.egg-info) never land in the checkout and no stale file from an earlier build slips into the
wheel. SOURCE_DATE_EPOCH fixes the archive's timestamps: the same sources give the same bytes,
so the role copies and reinstalls the wheel only when the code really changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip archive can hold


def main() -> int:
    source, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    if not (source / "pyproject.toml").is_file():
        print(
            f"build-wheel: {source} is not the kit's checkout (no pyproject.toml)", file=sys.stderr
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkops-wheel-") as tmp:
        copy = Path(tmp) / "src-copy"
        copy.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(source / name, copy / name)
        shutil.copytree(
            source / "src",
            copy / "src",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
        )
        wheels = Path(tmp) / "wheels"
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels)]
        result = subprocess.run([*command, str(copy)], env=env, capture_output=True, text=True)
        if result.returncode:
            print(f"build-wheel: pip wheel failed:\n{result.stderr[-4000:]}", file=sys.stderr)
            return 1
        (wheel,) = wheels.glob("sparkops-*.whl")
        target = out / wheel.name
        shutil.copyfile(wheel, target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
