#!/usr/bin/env bash
# Create (once) the virtual environment that runs the LiteLLM proxy (the data-parallel
# router), apart from the kit's .venv: litellm[proxy] pins fastapi, pydantic and friends.
# Idempotent: a venv whose litellm already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE    cache folder (default: .cache next to the Makefile)
#   LITELLM_VERSION   litellm release (default: LITELLM_VERSION in src/sparkops/versions.env,
#                     the release the deploy tests ran)
#   PYTHON            interpreter to build the venv from (default python3)
set -euo pipefail
# shellcheck source=scripts/local/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
# Importing litellm would fetch its model cost map from the internet: use the bundled copy.
export LITELLM_LOCAL_MODEL_COST_MAP=True
version=${LITELLM_VERSION:-$PINNED_LITELLM_VERSION}
ensure_venv litellm litellm "$version" litellm.proxy.proxy_server "litellm[proxy]==$version"
"$VENV/bin/python" -c 'import litellm.proxy.proxy_server; from importlib.metadata import version; print("litellm ready:", version("litellm"))'
