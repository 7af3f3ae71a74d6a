#!/usr/bin/env bash
# Issue 31: the router against the real LMCache controller from PyPI.
# Builds a small virtualenv (lmcache 0.5.6 without its dependencies, plus
# what the controller imports: scripts/lmcache/requirements.txt; torch and
# transformers are stand-ins, scripts/lmcache/stubs/), then runs the
# router's `lmcache` tests with LMCACHE_VENV set (without it, the
# real-controller test skips itself with a message). The venv is kept
# (default target/lmcache-venv, or $LMCACHE_VENV) and reused.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${LMCACHE_VENV:-$PWD/target/lmcache-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import lmcache, msgspec, zmq' 2>/dev/null; then
  start=$(date +%s)
  python3 -m venv "$venv"
  # pip lists lmcache's declared dependencies left out on purpose (torch,
  # transformers, …): the controller does not import them.
  quiet() { grep -v -e "requires" -e "dependency resolver" -e "dependency conflicts" || true; }
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "lmcache==${LMCACHE_VERSION:-0.5.6}" 2>&1 | quiet
  "$venv/bin/pip" install -q --disable-pip-version-check -r scripts/lmcache/requirements.txt 2>&1 | quiet
  echo "lmcache-test.sh: venv built in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
fi
export LMCACHE_VENV="$venv"
cargo test -p prefix-router --test it lmcache:: -- --test-threads=1 --nocapture "$@"
# The sim with LMCache beside it (the load-test arm's engine) against the same controller.
cargo test -p sim-worker --test it sim_lmcache:: -- --nocapture "$@"
