#!/usr/bin/env bash
# Runs `loadtest run ARGS…` in a private network namespace that holds only
# loopback: the `dynamo` peer's selection service binds every interface
# (0.0.0.0 and tcp://*) and has no option against it, so the whole
# comparison (every arm, the same way) runs where "every interface" is lo.
# Installs the peers first (that needs PyPI, outside the namespace) and
# builds the binaries if missing.
#
# Usage: scripts/peers-bench.sh --peer smg --policies cache_aware:4,smg:4 …
# Env:   BIN_DIR  where loadtest, prefix-router and sim-worker are
#                 (default: <target>/release, built if missing)
# Needs unshare (util-linux) and ip (iproute2); works without root
# (unshare -r maps the caller to root inside the namespace).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
"$repo/loadtest/peers/install.sh" "$repo/target/peers" >/dev/null
bin="${BIN_DIR:-$target/release}"
for b in loadtest prefix-router sim-worker; do
  [ -x "$bin/$b" ] || (cd "$repo" && cargo build --release --bin "$b")
done
cd "$repo"
exec unshare -rn sh -c 'ip link set lo up && exec "$0" run "$@"' "$bin/loadtest" \
  --router-bin "$bin/prefix-router" --sim-bin "$bin/sim-worker" "$@"
