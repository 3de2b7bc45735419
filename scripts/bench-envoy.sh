#!/usr/bin/env bash
# What a limit costs Envoy 1.40 per request (docs/rlqs.md, "Measured"): the same Envoy (one
# worker, every request routed to a second listener of its own that answers 200) with no limit,
# with its in-process `local_ratelimit`, with `rate_limit_quota` enforcing floodgate's RLQS
# assignments, and with the `ratelimit` filter calling, per request, a no-op RLS
# (examples/noop_rls.rs: the cost of the call itself), floodgate on its memory store and
# floodgate on Redis. The limits are far above the load, so every request is admitted and what
# is measured is the limit's own cost. h2load sends HTTP/1.1 over kept-alive connections,
# closed loop, for BENCH_SECONDS after a warm-up; the configurations take turns, BENCH_ROUNDS
# rounds, and each is given as the median of its rounds over the median of "no limit": single
# runs vary by ±15 % on a shared host. Release builds throughout. For the `ratelimit`
# configurations it also gives the RLS process's own CPU per request (from /proc, over the
# measured seconds), which varies far less: what the RLS costs the host it shares with Envoy.
#
#   scripts/bench-envoy.sh          # BENCH_ROUNDS=5 BENCH_SECONDS=10 BENCH_CONNECTIONS=8
#
# The report goes to BENCH_OUT [docs/benchmarks-envoy.md; with BENCH_INSTRUCTIONS=1,
# docs/benchmarks-envoy-instructions.md] and to the terminal.
#
# A seventh configuration, `rate_limit_quota` with every request in one fixed bucket (no
# matcher, no bucket id read from the request), is the filter's own floor.
#
# BENCH_INSTRUCTIONS=1 counts instead of timing: each configuration once, Envoy under
# callgrind (valgrind), its instructions over BENCH_REQUESTS requests [10000] after a warm-up
# (and after RLQS assignments have arrived), per request. Instructions do not depend on what
# else the host runs, so this mode is exact where the timed one varies by ±15 %; it ignores
# what an instruction costs (cache misses, syscalls' waits), so it is the explanation beside
# the timed figure, not a replacement for it. About 20 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${BENCH_ROUNDS:-5}"
INSTRUCTIONS="${BENCH_INSTRUCTIONS:-0}"
REQUESTS="${BENCH_REQUESTS:-10000}"
SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
CONNECTIONS="${BENCH_CONNECTIONS:-8}"
# h2load's unmeasured warm-up; the RLS's CPU is read once it is over.
WARMUP_SECONDS=2
ENVOY="${FLOODGATE_ENVOY:-.venv/bin/envoy}"
if [ "$INSTRUCTIONS" = 1 ]; then
  OUT="${BENCH_OUT:-docs/benchmarks-envoy-instructions.md}"
else
  OUT="${BENCH_OUT:-docs/benchmarks-envoy.md}"
fi

die() { echo "bench-envoy: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (free ports, the configs, the report)"
command -v h2load >/dev/null || die "h2load (nghttp2-client) is needed: scripts/install-peers.sh --bench"
[ -x "$ENVOY" ] || die "Envoy 1.40 not found at $ENVOY: run scripts/install-peers.sh or set FLOODGATE_ENVOY"
if [ "$INSTRUCTIONS" = 1 ]; then
  command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
    die "BENCH_INSTRUCTIONS=1 needs valgrind (apt-get install valgrind)"
fi
for value in "$ROUNDS" "$SECONDS_PER_RUN" "$CONNECTIONS" "$REQUESTS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS, _SECONDS and _CONNECTIONS are whole numbers (got '$value')"
done

start_workspace bench-envoy
command -v redis-server >/dev/null || die "redis-server is needed (the Redis-backed RLS)"
release_build bench-envoy --bin floodgate --example noop_rls
FLOODGATE="$BIN/floodgate"
NOOP_RLS="$BIN/examples/noop_rls"

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
# The memory store's floodgate serves RLQS and the memory RLS alike (one gRPC port).
start_floodgate "$FLOODGATE" "$WORK/rules" "$WORK/floodgate.log"
SERVERS=("$SERVER_PID")
MEMORY_PORT="$GRPC_PORT"
MEMORY_PID="$SERVER_PID"
read -r REDIS_PORT NOOP_PORT EDGE ADMIN DIRECT < <(free_ports 5)
start_redis "$REDIS_PORT" "$WORK" "$WORK/redis.log"
SERVERS+=("$REDIS_PID")
PIDS=("${SERVERS[@]}")
start_floodgate "$FLOODGATE" "$WORK/rules" "$WORK/floodgate-redis.log" \
  --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT/0"
SERVERS+=("$SERVER_PID")
REDIS_RLS_PORT="$GRPC_PORT"
REDIS_RLS_PID="$SERVER_PID"
"$NOOP_RLS" --addr "127.0.0.1:$NOOP_PORT" >"$WORK/noop.log" 2>&1 &
NOOP_PID=$!
SERVERS+=("$NOOP_PID")
PIDS=("${SERVERS[@]}")
wait_port noop_rls "$!" "$NOOP_PORT" "$WORK/noop.log"

# The bootstraps: the guide's (deploy/envoy/rlqs.yaml) with its route sent to a second listener
# of the same Envoy (the ratelimit filter does nothing on a direct_response route), and its
# rate_limit_quota filter kept, replaced by local_ratelimit or ratelimit, or taken out.
python3 - "$WORK" "$EDGE" "$ADMIN" "$DIRECT" "$MEMORY_PORT" "$NOOP_PORT" "$REDIS_RLS_PORT" <<'PY'
import sys
work, edge, admin, direct, memory, noop, redis_rls = sys.argv[1:]
template = open("deploy/envoy/rlqs.yaml").read()
template = (template.replace("port_value: 10000", f"port_value: {edge}")
                    .replace("port_value: 9903", f"port_value: {admin}"))
answer = """              routes:
              - match: {prefix: "/"}
                direct_response:
                  status: 200
                  body: {inline_string: "ok\\n"}
"""
if answer not in template:
    sys.exit("deploy/envoy/rlqs.yaml no longer answers with the direct_response this script routes")
routed = """              rate_limits:
              - actions:
                - request_headers: {header_name: x-tenant, descriptor_key: tenant}
              routes:
              - match: {prefix: "/"}
                route: {cluster: local_direct}
"""
direct_listener = f"""  - name: direct_200
    address:
      socket_address: {{address: 127.0.0.1, port_value: {direct}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: direct_200
          route_config:
            virtual_hosts:
            - name: direct
              domains: ["*"]
{answer}          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router

"""
direct_cluster = f"""  - name: local_direct
    type: STATIC
    connect_timeout: 0.25s
    load_assignment:
      cluster_name: local_direct
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {direct}}}
"""
text = template.replace(answer, routed, 1)
text = text.replace("  clusters:\n", direct_listener + "  clusters:\n" + direct_cluster, 1)
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
# failure_mode_deny: an RLS that fails shows as 500s, which fail the run.
rls = """          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: edge
              timeout: 0.1s
              failure_mode_deny: true
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {cluster_name: floodgate}
"""
def at(port, body):
    return body.replace("port_value: 8081", f"port_value: {port}")
open(f"{work}/rlqs.yaml", "w").write(at(memory, text))
open(f"{work}/local.yaml", "w").write(at(memory, text[:start] + local + text[end:]))
open(f"{work}/none.yaml", "w").write(at(memory, text[:start] + text[end:]))
for name, port in (("rls-noop", noop), ("rls-memory", memory), ("rls-redis", redis_rls)):
    open(f"{work}/{name}.yaml", "w").write(at(port, text[:start] + rls + text[end:]))
# The filter's floor: every request in one fixed bucket, the guide's anonymous one.
matchers = text.index("              bucket_matchers:", start)
fallback = text.index("                on_no_match:", matchers)
one_bucket = ("              bucket_matchers:\n"
              + text[fallback:end])
open(f"{work}/rlqs-one-bucket.yaml", "w").write(at(memory, text[:matchers] + one_bucket + text[end:]))
PY

# rls_pid CONFIG: the RLS process a `ratelimit` configuration calls (none for the others).
rls_pid() {
  case "$1" in
    rls-noop) echo "$NOOP_PID" ;;
    rls-memory) echo "$MEMORY_PID" ;;
    rls-redis) echo "$REDIS_RLS_PID" ;;
  esac
}

# cpu_ticks PID: the process's CPU time so far (user and system), in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# run CONFIG: one Envoy on CONFIG, warmed up, measured; prints requests a second, and for a
# `ratelimit` configuration the RLS process's CPU per request over the measured seconds, in µs
# (which varies far less than the rate: what the RLS costs the host, whatever else runs).
run() {
  local config="$1" pid out rls cpu_before="" cpu_after=""
  "$ENVOY" -c "$WORK/$config.yaml" --disable-hot-restart --concurrency 1 --log-level error \
    >"$WORK/envoy-$config.log" 2>&1 &
  pid=$!
  PIDS=("${SERVERS[@]}" "$pid")
  wait_port envoy "$pid" "$EDGE" "$WORK/envoy-$config.log"
  rls="$(rls_pid "$config")"
  [ -n "$rls" ] && { sleep "$WARMUP_SECONDS"; cpu_ticks "$rls" >"$WORK/cpu-before"; } &
  out="$(h2load --h1 -c "$CONNECTIONS" -m 1 -D "$SECONDS_PER_RUN" --warm-up-time="$WARMUP_SECONDS" \
    -H 'x-tenant: acme-corp' "http://127.0.0.1:$EDGE/" 2>&1)" || { echo "$out" >&2; die "h2load failed"; }
  wait $! 2>/dev/null || true
  if [ -n "$rls" ]; then
    cpu_after="$(cpu_ticks "$rls")"
    cpu_before="$(cat "$WORK/cpu-before")"
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  PIDS=("${SERVERS[@]}")
  python3 -c '
import os, re, sys
text = sys.stdin.read()
ok = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
if not ok or int(ok.group(3)) + int(ok.group(4)) > 0:
    sys.exit("requests were denied or failed: the limit is meant to be out of the way")
rate = float(re.search(r"finished in [^,]+, ([0-9.]+) req/s", text).group(1))
before, after, seconds = sys.argv[1:]
if before:
    ticks = os.sysconf("SC_CLK_TCK")
    print(rate, round((float(after) - float(before)) / ticks * 1e6 / (rate * float(seconds)), 1))
else:
    print(rate)
' "$cpu_before" "$cpu_after" "$SECONDS_PER_RUN" <<<"$out"
}

CONFIGS=(none local rlqs rlqs-one-bucket rls-noop rls-memory rls-redis)
# What each configuration is, for both reports.
cat >"$WORK/names.py" <<'PY'
NAMES = {"none": "Envoy, no limit", "local": "`local_ratelimit` (in Envoy)",
         "rlqs": "`rate_limit_quota` → floodgate RLQS",
         "rlqs-one-bucket": "`rate_limit_quota`, one fixed bucket for every request (the filter's floor)",
         "rls-noop": "`ratelimit` → no-op RLS (the call alone)",
         "rls-memory": "`ratelimit` → floodgate, memory store",
         "rls-redis": "`ratelimit` → floodgate, Redis store"}
PY

# send N: N requests from h2load, as the timed runs send them; prints h2load's report.
send() {
  h2load --h1 -c "$CONNECTIONS" -m 1 -n "$1" -H 'x-tenant: acme-corp' "http://127.0.0.1:$EDGE/" 2>&1
}

# count CONFIG: one Envoy on CONFIG under callgrind; prints its instructions per request over
# REQUESTS requests, counted from after the warm-up. (--trace-children: .venv/bin/envoy is a
# Python launcher that execs the binary.)
count() {
  local config="$1" pid dump
  valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$WORK/cg-$config.%p" \
    "$ENVOY" -c "$WORK/$config.yaml" --disable-hot-restart --concurrency 1 --log-level error \
    >"$WORK/envoy-$config.log" 2>&1 &
  pid=$!
  PIDS=("${SERVERS[@]}" "$pid")
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$WORK/envoy-$config.log" >&2; die "envoy exited under valgrind"; }
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $EDGE), 0.2).close()" 2>/dev/null && break
    sleep 1
  done
  send 3000 >/dev/null
  # RLQS: Envoy reports after 5 s; the assignments that answer it are then in place.
  sleep 6
  send 2000 >/dev/null
  callgrind_control -z "$pid" >/dev/null
  send "$REQUESTS" >"$WORK/h2load-$config.txt"
  callgrind_control -d "$pid" >/dev/null
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  PIDS=("${SERVERS[@]}")
  dump="$WORK/cg-$config.$pid.1"
  [ -s "$dump" ] || die "callgrind wrote no dump for $config"
  python3 - "$dump" "$REQUESTS" "$WORK/h2load-$config.txt" <<'PY'
import re, sys
dump, requests, answers = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ok = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", open(answers).read())
if not ok or int(ok.group(1)) != requests:
    sys.exit("requests were denied or failed: the limit is meant to be out of the way")
totals = [int(line.split()[1]) for line in open(dump, errors="replace") if line.startswith("totals:")]
print(round(totals[0] / requests))
PY
}

if [ "$INSTRUCTIONS" = 1 ]; then
  : >"$WORK/counts"
  for config in "${CONFIGS[@]}"; do
    count="$(count "$config")"
    echo "bench-envoy: $config $count instructions per request" >&2
    echo "$config $count" >>"$WORK/counts"
  done
  { echo "# What a limit costs Envoy, in instructions"; echo
  python3 - "$WORK/counts" "$REQUESTS" "$CONNECTIONS" "$(report_provenance "scripts/bench-envoy.sh (BENCH_INSTRUCTIONS=1)")" <<'PY'
import os, sys
path, requests, connections, provenance = sys.argv[1:]
sys.path.insert(0, os.path.dirname(path))
from names import NAMES as names
counts = dict((line.split()[0], int(line.split()[1])) for line in open(path))
print(provenance + "\n")
print(f"Envoy's instructions (callgrind) per request over {requests} requests, "
      f"{connections} HTTP/1.1 connections, Envoy on one worker, after a warm-up\n")
print("| configuration | instructions per request | ratio to no limit | its inverse (the throughput if instructions alone set it) |")
print("|---|--:|--:|--:|")
for config, count in counts.items():
    ratio = count / counts["none"]
    print(f"| {names[config]} | {count:,} | {ratio:.3f} | {1 / ratio:.2f} |")
PY
  } | tee "$OUT"
  echo "bench-envoy: wrote $OUT" >&2
  exit 0
fi

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
: >"$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
  for config in "${CONFIGS[@]}"; do
    read -r rate cpu < <(run "$config")
    echo "bench-envoy: round $round $config $rate req/s${cpu:+, RLS CPU $cpu µs a request}" >&2
    echo "$config $rate $cpu" >>"$WORK/results"
  done
done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

{ echo "# What a limit costs Envoy, timed"; echo
python3 - "$WORK/results" "$ROUNDS" "$SECONDS_PER_RUN" "$CONNECTIONS" "$LOAD_BEFORE" "$LOAD_AFTER" "$(report_provenance scripts/bench-envoy.sh)" <<'PY'
import os, statistics, sys
path, rounds, seconds, connections, before, after, provenance = sys.argv[1:]
runs, cpus = {}, {}
for line in open(path):
    config, rate, *cpu = line.split()
    runs.setdefault(config, []).append(float(rate))
    if cpu:
        cpus.setdefault(config, []).append(float(cpu[0]))
base = statistics.median(runs["none"])
sys.path.insert(0, os.path.dirname(path))
from names import NAMES as names
print(provenance + "\n")
print(f"{rounds} rounds of {seconds} s, {connections} HTTP/1.1 connections, "
      f"Envoy on one worker; load average before {before}, after {after}\n")
print("| configuration | median ratio to no limit | each round's ratio to that round's no limit |")
print("|---|---|---|")
for config in ("none", "local", "rlqs", "rlqs-one-bucket", "rls-noop", "rls-memory", "rls-redis"):
    rates = runs[config]
    per_round = [rate / none for rate, none in zip(rates, runs["none"])]
    print(f"| {names[config]} | {statistics.median(rates) / base:.2f} | "
          + ", ".join(f"{r:.2f}" for r in per_round) + " |")
median = {config: statistics.median(rates) for config, rates in runs.items()}
print(f"\nRLQS / local_ratelimit: {median['rlqs'] / median['local']:.2f}; "
      f"floodgate memory / no-op RLS: {median['rls-memory'] / median['rls-noop']:.2f}; "
      f"floodgate Redis / no-op RLS: {median['rls-redis'] / median['rls-noop']:.2f}")
print("\nThe RLS process's own CPU per request over the measured seconds (user and system, "
      "from /proc), which varies far less from round to round than the rates:\n")
print("| RLS | µs a request, median | each round | ratio to the no-op's |")
print("|---|--:|---|--:|")
noop_cpu = statistics.median(cpus["rls-noop"])
for config in ("rls-noop", "rls-memory", "rls-redis"):
    cpu = statistics.median(cpus[config])
    print(f"| {names[config]} | {cpu:.1f} | " + ", ".join(f"{c:.1f}" for c in cpus[config])
          + f" | {cpu / noop_cpu:.2f} |")
PY
} | tee "$OUT"
echo "bench-envoy: wrote $OUT" >&2
