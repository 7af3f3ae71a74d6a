#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs
# (valkey-server 8 from bookworm-backports, haproxy and redis-server 7 when
# missing), then checks formatting and lints and runs every test of every
# crate of the workspace (crates/* and loadtest) against real valkey-servers,
# and the tests of the shared state again against redis-server 7.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

# The state suite on Redis 7: the Lua library must run on plain Redis too.
# The tests start their server from $VALKEY_SERVER (crates/fleet); the
# suite is the state crate's own (crates/state/tests).
redis_bin=$(command -v redis-server || echo /usr/bin/redis-server)
echo "test: the state suite against $("$redis_bin" --version | cut -d' ' -f1-3)"
VALKEY_SERVER="$redis_bin" cargo test --locked -p state
