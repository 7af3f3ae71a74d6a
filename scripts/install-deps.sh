#!/usr/bin/env bash
# Installs what the test suite and the load test need on a fresh Debian
# bookworm machine: valkey-server 8 from bookworm-backports, HAProxy (the
# load test's L4 balancer) and redis-server 7 from Debian, and kubectl (the
# deployment tests' `kubectl kustomize`) from dl.k8s.io. Idempotent; does
# nothing when present.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

updated=""
apt_update() {
  if [ -z "$updated" ]; then
    $SUDO apt-get update -qq
    updated=1
  fi
}

if ! have valkey-server; then
  echo "install-deps: installing valkey-server from bookworm-backports"
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" |
      $SUDO tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
  fi
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports \
    valkey-server valkey-tools >/dev/null
  # The package starts a system service on 6379; tests never use it.
  $SUDO systemctl disable --now valkey-server >/dev/null 2>&1 || true
fi
echo "install-deps: $(valkey-server --version)"

if ! have haproxy; then
  echo "install-deps: installing haproxy"
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq haproxy >/dev/null
  # The load test runs its own HAProxy on ephemeral ports, never the service.
  $SUDO systemctl disable --now haproxy >/dev/null 2>&1 || true
fi
haproxy_bin=$(command -v haproxy || echo /usr/sbin/haproxy)
echo "install-deps: $("$haproxy_bin" -v | head -n 1)"

# Redis 7 (Debian's): the state suite also runs against it, since managed
# services and existing deployments often run Redis rather than Valkey.
if ! have redis-server; then
  echo "install-deps: installing redis-server"
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  # Like Valkey's, the package's service is never used by the tests.
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
redis_bin=$(command -v redis-server || echo /usr/bin/redis-server)
echo "install-deps: $("$redis_bin" --version)"

# kubectl (its built-in kustomize): the deployment tests render every
# kustomization of deploy/kubernetes with `kubectl kustomize`. Not in
# Debian's archive: the release binary from dl.k8s.io, checked against its
# published SHA-256.
if ! have kubectl; then
  KUBECTL_VERSION="${KUBECTL_VERSION:-v1.32.4}"
  case "$(uname -m)" in
    x86_64) kubectl_arch=amd64 ;;
    aarch64 | arm64) kubectl_arch=arm64 ;;
    *) echo "install-deps: no kubectl build for $(uname -m)" >&2; exit 1 ;;
  esac
  echo "install-deps: installing kubectl $KUBECTL_VERSION from dl.k8s.io"
  kubectl_url="https://dl.k8s.io/release/$KUBECTL_VERSION/bin/linux/$kubectl_arch/kubectl"
  kubectl_tmp=$(mktemp -d)
  curl -fsSL -o "$kubectl_tmp/kubectl" "$kubectl_url"
  curl -fsSL -o "$kubectl_tmp/kubectl.sha256" "$kubectl_url.sha256"
  echo "$(cat "$kubectl_tmp/kubectl.sha256")  $kubectl_tmp/kubectl" | sha256sum --check --quiet
  $SUDO install -m 0755 "$kubectl_tmp/kubectl" /usr/local/bin/kubectl
  rm -rf "$kubectl_tmp"
fi
echo "install-deps: $(kubectl version --client 2>/dev/null | tr '\n' ' ')"
