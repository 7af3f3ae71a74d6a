#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian bookworm machine:
# valkey-server 8 from bookworm-backports. Idempotent; does nothing when present.
set -euo pipefail

if command -v valkey-server >/dev/null 2>&1; then
  echo "install-deps: $(valkey-server --version)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

echo "install-deps: installing valkey-server from bookworm-backports"
if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "deb http://deb.debian.org/debian bookworm-backports main" |
    $SUDO tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports \
  valkey-server valkey-tools >/dev/null
# The package starts a system service on 6379; tests never use it.
$SUDO systemctl disable --now valkey-server >/dev/null 2>&1 || true
echo "install-deps: $(valkey-server --version)"
