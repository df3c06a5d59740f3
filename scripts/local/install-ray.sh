#!/usr/bin/env bash
# Create (once) the virtual environment that holds Ray (`ray status` for the pipeline-parallel
# tests; the cluster itself runs in containers), apart from the kit's .venv.
# Idempotent: a venv whose ray already imports at the pinned version is reused.
#
# Env:
#   SPARKOPS_CACHE   cache folder (default: .cache next to the Makefile)
#   RAY_VERSION      ray release (default: RAY_VERSION in src/sparkops/versions.env, the
#                    version the kit's images install)
#   PYTHON           interpreter to build the venv from (default python3)
set -euo pipefail
# shellcheck source=scripts/local/venv-lib.sh
. "$(dirname "$0")/venv-lib.sh"
version=${RAY_VERSION:-$PINNED_RAY_VERSION}
ensure_venv ray ray "$version" ray "ray[default]==$version"
"$VENV/bin/python" -c 'import ray; print("ray ready:", ray.__version__)'
