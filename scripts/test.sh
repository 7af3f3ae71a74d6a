#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs
# (valkey-server 8 from bookworm-backports, haproxy, redis-server 7 and
# kubectl when missing), checks formatting, then builds every target of the
# workspace once with clippy's lints as errors, runs every test of every
# crate (crates/* and loadtest) against real valkey-servers, and the state
# suite again against redis-server 7. Prints each phase's wall and CPU time.
#
# Tests run under cargo-nextest when it is installed (several tests at once
# across all test binaries; settings in .config/nextest.toml), else under
# `cargo test`. What it runs and how long it takes: docs/architecture.md,
# "The test command".
set -euo pipefail
cd "$(dirname "$0")/.."

TIMEFORMAT='test.sh: %R s wall, %U s user + %S s sys CPU'
phase() {
  echo "test.sh: $1"
  shift
  time "$@"
}

phase "dependencies" ./scripts/install-deps.sh
phase "format" cargo fmt --all -- --check

# Lints and the test build in one compile: clippy's driver compiles the
# workspace's crates (lints as errors, as `cargo clippy --all-targets -D
# warnings` would), rustc the dependencies, which are then built once
# instead of once checked for clippy and once built for the tests. The
# tests below keep the same wrapper, so they reuse this build.
# A clean build gains nothing from incremental compilation's bookkeeping
# (the dependency graph and query caches it writes for the next build): off
# here, as on most CI systems. A developer's `cargo test` keeps it.
export CARGO_INCREMENTAL=0
# Nor does it keep line tables for the workspace's crates (the dev
# profile's `debug = "line-tables-only"`, which a developer's build keeps):
# a failing test still prints its panic's file and line, and a backtrace
# still names the functions. Less to generate and link: ≈ 12 % of the
# workspace's compile CPU (docs/results/2026-11-28-test-command/journal.md,
# "Session 7").
export CARGO_PROFILE_DEV_DEBUG=false

# proptest draws its inputs with XorShift rather than its default ChaCha
# (the same cases, from a generator a debug build runs ~7× faster: proptest
# seeds a new ChaCha for every alternative of every `prop_oneof!`, and one
# vllm_metrics property spent 85% of its time there). A failure prints its
# seed either way; replay it with the same PROPTEST_RNG_ALGORITHM.
export PROPTEST_RNG_ALGORITHM=xs

clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [ -x "$clippy_driver" ]; then
  export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  phase "build every target with clippy's lints" \
    cargo test --workspace --all-targets --locked --no-run
else
  phase "clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
  phase "build the tests" cargo test --workspace --all-targets --locked --no-run
fi

# The state suite on Redis 7 as well: the Lua library must run on plain
# Redis too. The tests start their server from $VALKEY_SERVER (crates/fleet).
redis_bin=$(command -v redis-server || echo /usr/bin/redis-server)
redis_version=$("$redis_bin" --version | cut -d' ' -f1-3)

if cargo nextest --version >/dev/null 2>&1; then
  # The Redis 7 pass runs beside the main run (the tests wait on sockets
  # and child processes more than they compute: the 2 cores have room),
  # its output kept apart and printed after the main run's. It selects the
  # state package with a filter, not `-p state`: `-p` resolves the
  # dependencies' features for that package alone, and so rebuilt 63
  # crates (≈ 240 s at load 15, the main run waiting on cargo's lock);
  # `--workspace` reuses the build above.
  redis_log=$(mktemp)
  (phase "the state suite against $redis_version (beside the main run)" \
    env VALKEY_SERVER="$redis_bin" cargo nextest run --workspace --locked \
    --profile ci-redis -E 'package(state)') >"$redis_log" 2>&1 &
  redis_pass=$!
  main_status=0
  phase "every test (nextest)" cargo nextest run --workspace --locked --profile ci ||
    main_status=$?
  redis_status=0
  wait "$redis_pass" || redis_status=$?
  cat "$redis_log"
  rm -f "$redis_log"
  # No doctest phase: nextest does not run doctests, and no crate has any
  # (each says `doctest = false`; the push module's example, the last one,
  # runs as a router test).
  if [ "$main_status" -ne 0 ] || [ "$redis_status" -ne 0 ]; then
    echo "test.sh: tests failed (main run: exit $main_status, Redis 7 pass: exit $redis_status)"
    exit 1
  fi
else
  echo "test.sh: cargo-nextest is not installed; running the tests with cargo test"
  phase "every test (cargo test)" cargo test --workspace --locked
  phase "the state suite against $redis_version" \
    env VALKEY_SERVER="$redis_bin" cargo test --locked -p state
fi
