#!/usr/bin/env bash
# Create (once) the virtual environment that holds Ray (`ray status` for the pipeline-parallel
# tests; the cluster itself runs in containers), apart from the kit's .venv.
# Idempotent: a venv whose ray already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE   cache folder (default: .cache next to the Makefile)
#   RAY_VERSION      ray release (default 2.60.0, the version the kit's images install)
#   PYTHON           interpreter to build the venv from (default python3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPARKOPS_CACHE:-$here/.cache}
version=${RAY_VERSION:-2.60.0}
venv=$cache/venvs/ray
py=${PYTHON:-python3}

if [ -x "$venv/bin/ray" ] && "$venv/bin/python" - "$version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert version("ray") == sys.argv[1]
PY
then
  echo "ray $version: reusing $venv"
  exit 0
fi

echo "ray $version: creating $venv"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "ray[default]==$version"
"$venv/bin/python" -c 'import ray; print("ray ready:", ray.__version__)'
