#!/usr/bin/env bash
# What a limit costs Envoy 1.40 per request (docs/rlqs.md, "Measured"): the same Envoy (one
# worker, a direct_response route) with no limit, with its in-process `local_ratelimit`, and with
# `rate_limit_quota` enforcing floodgate's RLQS assignments; the limits are far above the load, so
# every request is admitted and what is measured is the filter's own cost. h2load sends HTTP/1.1
# over kept-alive connections, closed loop, for BENCH_SECONDS after a warm-up; the configurations
# take turns, BENCH_ROUNDS rounds, and each is given as the median of its rounds over the median
# of "no limit": single runs vary by ±15 % on a shared host.
#
# floodgate is off the request path with RLQS (it is only streamed usage every 5 s), so its debug
# build is used. RLS through the `ratelimit` filter (a call per request, where floodgate's build
# matters) is measured by scripts/bench-load.sh, not here.
#
#   scripts/bench-envoy.sh          # BENCH_ROUNDS=5 BENCH_SECONDS=10 BENCH_CONNECTIONS=8
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${BENCH_ROUNDS:-5}"
SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
CONNECTIONS="${BENCH_CONNECTIONS:-8}"
ENVOY="${FLOODGATE_ENVOY:-.venv/bin/envoy}"

die() { echo "bench-envoy: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (free ports, the configs, the report)"
command -v h2load >/dev/null || die "h2load (nghttp2-client) is needed: apt-get install nghttp2-client"
[ -x "$ENVOY" ] || die "Envoy 1.40 not found at $ENVOY: run scripts/install-peers.sh or set FLOODGATE_ENVOY"
for value in "$ROUNDS" "$SECONDS_PER_RUN" "$CONNECTIONS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS, _SECONDS and _CONNECTIONS are whole numbers (got '$value')"
done

start_workspace bench-envoy
echo "bench-envoy: building floodgate (debug)" >&2
cargo build --bin floodgate >"$WORK/build.log" 2>&1 || { tail -n 40 "$WORK/build.log" >&2; die "the build failed"; }
FLOODGATE="$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug/floodgate"

mkdir -p "$WORK/rules"
cat >"$WORK/rules/edge.yaml" <<'YAML'
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 10000000}
  - key: name
    value: anonymous
    rate_limit: {unit: second, requests_per_unit: 10000000}
YAML
start_floodgate "$FLOODGATE" "$WORK/rules" "$WORK/floodgate.log"
FLOODGATE_PID="$SERVER_PID"

# The three bootstraps: the RLQS one is the guide's (deploy/envoy/rlqs.yaml); the others are it
# with the rate_limit_quota filter replaced.
read -r EDGE ADMIN < <(free_ports 2)
python3 - "$WORK" "$EDGE" "$ADMIN" "$GRPC_PORT" <<'PY'
import re, sys
work, edge, admin, grpc = sys.argv[1:]
text = open("deploy/envoy/rlqs.yaml").read()
text = (text.replace("port_value: 10000", f"port_value: {edge}")
            .replace("port_value: 9903", f"port_value: {admin}")
            .replace("port_value: 8081", f"port_value: {grpc}"))
open(f"{work}/rlqs.yaml", "w").write(text)
start = text.index("          - name: envoy.filters.http.rate_limit_quota")
end = text.index("          - name: envoy.filters.http.router")
local = """          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: local
              token_bucket: {max_tokens: 10000000, tokens_per_fill: 10000000, fill_interval: 1s}
              filter_enabled:
                default_value: {numerator: 100, denominator: HUNDRED}
              filter_enforced:
                default_value: {numerator: 100, denominator: HUNDRED}
"""
open(f"{work}/local.yaml", "w").write(text[:start] + local + text[end:])
open(f"{work}/none.yaml", "w").write(text[:start] + text[end:])
PY

# run CONFIG: one Envoy on CONFIG, warmed up, measured; prints requests a second.
run() {
  local config="$1" pid out
  "$ENVOY" -c "$WORK/$config.yaml" --disable-hot-restart --concurrency 1 --log-level error \
    >"$WORK/envoy-$config.log" 2>&1 &
  pid=$!
  PIDS=("$FLOODGATE_PID" "$pid")
  wait_port envoy "$pid" "$EDGE" "$WORK/envoy-$config.log"
  out="$(h2load --h1 -c "$CONNECTIONS" -m 1 -D "$SECONDS_PER_RUN" --warm-up-time=2 \
    -H 'x-tenant: acme-corp' "http://127.0.0.1:$EDGE/" 2>&1)" || { echo "$out" >&2; die "h2load failed"; }
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  PIDS=("$FLOODGATE_PID")
  python3 -c '
import re, sys
text = sys.stdin.read()
ok = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx", text)
if ok and int(ok.group(3)) > 0:
    sys.exit("requests were denied: the limit is meant to be out of the way")
print(re.search(r"finished in [^,]+, ([0-9.]+) req/s", text).group(1))
' <<<"$out"
}

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
: >"$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
  for config in none local rlqs; do
    rate="$(run "$config")"
    echo "bench-envoy: round $round $config $rate req/s" >&2
    echo "$config $rate" >>"$WORK/results"
  done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK/results" "$ROUNDS" "$SECONDS_PER_RUN" "$CONNECTIONS" "$LOAD_BEFORE" "$LOAD_AFTER" "$(report_commit)" <<'PY'
import statistics, sys
path, rounds, seconds, connections, before, after, commit = sys.argv[1:]
runs = {}
for line in open(path):
    config, rate = line.split()
    runs.setdefault(config, []).append(float(rate))
base = statistics.median(runs["none"])
names = {"none": "Envoy, no limit", "local": "`local_ratelimit` (in Envoy)",
         "rlqs": "`rate_limit_quota` → floodgate RLQS"}
print(f"commit {commit}; {rounds} rounds of {seconds} s, {connections} HTTP/1.1 connections, "
      f"Envoy on one worker; load average before {before}, after {after}\n")
print("| configuration | median ratio to no limit | each round's ratio to that round's no limit |")
print("|---|---|---|")
for config in ("none", "local", "rlqs"):
    rates = runs[config]
    per_round = [rate / none for rate, none in zip(rates, runs["none"])]
    print(f"| {names[config]} | {statistics.median(rates) / base:.2f} | "
          + ", ".join(f"{r:.2f}" for r in per_round) + " |")
local, rlqs = statistics.median(runs["local"]), statistics.median(runs["rlqs"])
print(f"\nRLQS / local_ratelimit: {rlqs / local:.2f}")
PY
