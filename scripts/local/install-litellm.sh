#!/usr/bin/env bash
# Create (once) the virtual environment that runs the LiteLLM proxy (the data-parallel
# router), apart from the kit's .venv: litellm[proxy] pins fastapi, pydantic and friends.
# Idempotent: a venv whose litellm already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE    cache folder (default: .cache next to the Makefile)
#   LITELLM_VERSION   litellm release (default: the newest the package index offers at the
#                     first install; pin it for reproducible deployments)
#   PYTHON            interpreter to build the venv from (default python3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPARKOPS_CACHE:-$here/.cache}
venv=$cache/venvs/litellm
py=${PYTHON:-python3}
spec="litellm[proxy]${LITELLM_VERSION:+==$LITELLM_VERSION}"

if [ -x "$venv/bin/litellm" ] && "$venv/bin/python" - "${LITELLM_VERSION:-}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert not sys.argv[1] or version("litellm") == sys.argv[1]
import litellm.proxy.proxy_server  # noqa: F401  (the proxy extra is present)
PY
then
  echo "litellm: reusing $venv"
  exit 0
fi

echo "litellm: creating $venv"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "$spec"
"$venv/bin/python" -c 'import litellm.proxy.proxy_server; from importlib.metadata import version; print("litellm ready:", version("litellm"))'
