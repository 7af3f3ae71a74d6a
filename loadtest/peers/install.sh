#!/usr/bin/env bash
# Creates the peer routers' virtualenvs with their pinned versions from PyPI,
# idempotently (a venv that already holds the pinned version is left alone).
# Same layout and pins as loadtest/src/peers/ (`install`).
#
# Usage: loadtest/peers/install.sh [ROOT] [PACKAGE...]
#   ROOT     where the venvs go (default: <repo>/target/peers)
#   PACKAGE  sglang-router, vllm-router (also runs vllm-router-kv), smg,
#            ai-dynamo-runtime (runs the dynamo peer) (default: all four)
# Env:   PEERS_PYTHON  interpreter that creates the venvs (default: the first
#        of python3.11 python3.12 python3.10 python3 that is >= 3.8 with venv
#        and ensurepip; on Debian that means the python3-venv package).
# Prints one line per peer: NAME VERSION VENV_PYTHON.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
root="${1:-$repo/target/peers}"
[ $# -gt 0 ] && shift
peers=("$@")
[ ${#peers[@]} -eq 0 ] && peers=(sglang-router vllm-router smg ai-dynamo-runtime)

pinned() {
  case "$1" in
    sglang-router) echo 0.3.2 ;;
    vllm-router) echo 0.1.17 ;;
    smg) echo 1.13.0 ;;
    ai-dynamo-runtime) echo 1.6.1 ;;
    *) echo "install.sh: unknown package '$1' (sglang-router, vllm-router, smg, ai-dynamo-runtime)" >&2; return 1 ;;
  esac
}

find_python() {
  local c
  for c in ${PEERS_PYTHON:-} python3.11 python3.12 python3.10 python3; do
    if command -v "$c" >/dev/null 2>&1 &&
      "$c" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 8) else 1)' 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  echo "install.sh: no Python >= 3.8 with venv/ensurepip found; set PEERS_PYTHON" >&2
  return 1
}

installed_version() {
  "$1" -c "import importlib.metadata as m; print(m.version('$2'))" 2>/dev/null
}

mkdir -p "$root"
for name in "${peers[@]}"; do
  version="$(pinned "$name")"
  venv="$root/$name-venv"
  py="$venv/bin/python"
  if [ -x "$py" ] && [ "$(installed_version "$py" "$name" || true)" = "$version" ]; then
    echo "$name $version $py"
    continue
  fi
  if [ ! -x "$py" ]; then
    base="$(find_python)"
    "$base" -m venv "$venv"
  fi
  "$py" -m pip install --disable-pip-version-check --no-input --quiet "$name==$version"
  got="$(installed_version "$py" "$name" || true)"
  if [ "$got" != "$version" ]; then
    echo "install.sh: $name in $venv is '$got', expected $version" >&2
    exit 1
  fi
  echo "$name $version $py"
done
