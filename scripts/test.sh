#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs
# (valkey-server 8 from bookworm-backports and haproxy when missing), then
# checks formatting and lints and runs every test of every crate of the
# workspace (crates/* and loadtest) against real valkey-servers.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
