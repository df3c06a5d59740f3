#!/usr/bin/env bash
# Create (once) the virtual environment that runs the LiteLLM proxy (the data-parallel
# router), apart from the kit's .venv: litellm[proxy] pins fastapi, pydantic and friends.
# Idempotent: a venv whose litellm already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE    cache folder (default: .cache next to the Makefile)
#   LITELLM_VERSION   litellm release (default 1.108.7, the release the deploy tests ran)
#   PYTHON            interpreter to build the venv from (default python3)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SPARKOPS_CACHE:-$here/.cache}
venv=$cache/venvs/litellm
py=${PYTHON:-python3}
version=${LITELLM_VERSION:-1.108.7}
spec="litellm[proxy]==$version"

if [ -x "$venv/bin/litellm" ] && "$venv/bin/python" - "$version" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
assert version("litellm") == sys.argv[1]
import litellm.proxy.proxy_server  # noqa: F401  (the proxy extra is present)
PY
then
  echo "litellm $version: reusing $venv"
  exit 0
fi

echo "litellm $version: creating $venv"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "$spec"
"$venv/bin/python" -c 'import litellm.proxy.proxy_server; from importlib.metadata import version; print("litellm ready:", version("litellm"))'
