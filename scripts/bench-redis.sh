#!/usr/bin/env bash
# Redis store benchmark: floodgate --store redis under examples/loadgen, beside redis-benchmark
# sending the very EVALSHA the store sends (one fixed-window counter), on the same machine and
# the same redis-server. redis-benchmark's EVALSHA/s is the ceiling for one round trip per
# decision; the report gives floodgate's decisions/s as a ratio of it. Its latency is set
# beside the floor of any Redis-backed ShouldRateLimit (examples/noop_rls.rs --redis-url: a
# gRPC server that runs the same EVALSHA once per call and nothing else), loaded the same way.
# Those runs use one script call per decision (--redis-batch-max 1). Then batching against it
# and against the memory store, each its own floodgate on the same machine: decisions/s,
# redis-server CPU per decision (against what redis-benchmark's unpipelined calls cost it),
# script calls per decision and latency, at peak and at a tenth of it (runs in ABBA order), and
# floodgate's CPU per decision with batches and with the memory store at half of the one-call
# peak.
#
#   scripts/bench-redis.sh         # writes docs/benchmarks-redis.md (about 2 minutes)
#
# Overrides (environment):
#   BENCH_SECONDS      length of each loadgen run, seconds            [10]
#   BENCH_CLIENTS      loadgen concurrency at peak, h2load calls in flight and redis-benchmark -c [50]
#   (the half-of-peak runs, evenly spaced then Poisson, may hold up to 2000 calls: none is shed)
#   BENCH_KEYS         distinct counters (loadgen --keys, -r)         [10000]
#   BENCH_REQUESTS     redis-benchmark -n without pipelining          [100000]
#   BENCH_REDIS_TIMEOUT_MS  floodgate --redis-timeout-ms              [100]
#     (not the 25 ms default: at saturation on 2 shared cores some decisions miss 25 ms, five
#     in a row open the circuit breaker, and fast failures would then count as throughput)
#   BENCH_PIPELINE     redis-benchmark -P for the pipelined run       [16]
#   BENCH_WORKER_THREADS  floodgate --worker-threads                  [1]
#     (1: tokio's single-threaded scheduler, which batches writes and Redis calls; redis-server
#     and the load generator need the other core. With one thread per core floodgate spent
#     about twice the CPU per decision here: 30 µs against 16 µs under h2load)
#   BENCH_BATCH_MAX    floodgate --redis-batch-max of the batching runs [64]
#   BENCH_TENTH_SECONDS  length of each run at a tenth of peak, seconds [30]
#     (longer than the others: at about 2 000 decisions/s, 10 s leave p99 to 200 samples, and
#     two runs of the same mode differed by a quarter)
#   BENCH_OUT          the report                                     [docs/benchmarks-redis.md]
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
CLIENTS="${BENCH_CLIENTS:-50}"
KEYS="${BENCH_KEYS:-10000}"
REQUESTS="${BENCH_REQUESTS:-100000}"
REDIS_TIMEOUT_MS="${BENCH_REDIS_TIMEOUT_MS:-100}"
PIPELINE="${BENCH_PIPELINE:-16}"
WORKER_THREADS="${BENCH_WORKER_THREADS:-1}"
BATCH_MAX="${BENCH_BATCH_MAX:-64}"
TENTH_SECONDS="${BENCH_TENTH_SECONDS:-30}"
OUT="${BENCH_OUT:-docs/benchmarks-redis.md}"
# The half-of-peak runs' cap on calls in flight (loadgen --concurrency): high enough that none
# is shed.
HALF_CAP=2000
# High enough that no counter is ever over: every decision writes, as most real ones do.
LIMIT=1000000

die() { echo "bench-redis: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
for tool in python3 redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || die "$tool is needed: scripts/install-peers.sh --bench"
done
for value in "$SECONDS_PER_RUN" "$CLIENTS" "$KEYS" "$REQUESTS" "$PIPELINE" "$REDIS_TIMEOUT_MS" \
  "$WORKER_THREADS" "$BATCH_MAX" "$TENTH_SECONDS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_* values must be whole numbers (got '$value')"
done

start_workspace bench-redis
release_build bench-redis --bin floodgate --example loadgen --example redis_script \
  --example noop_rls

read -r REDIS_PORT GRPC_PORT HTTP_PORT METRICS_PORT FLOOR_PORT BATCH_GRPC_PORT BATCH_HTTP_PORT \
  BATCH_METRICS_PORT MEMORY_GRPC_PORT MEMORY_HTTP_PORT MEMORY_METRICS_PORT < <(free_ports 11)

start_redis "$REDIS_PORT" "$WORK" "$WORK/redis.log"
PIDS+=("$REDIS_PID")

write_counter_config "$WORK/config" "$LIMIT"
# serve NAME GRPC HTTP METRICS FLAGS…: a floodgate on these ports, logging to NAME.log; its pid
# in SERVED_PID once gRPC listens. Idle ones cost the others nothing.
serve() {
  local name="$1" grpc="$2" http="$3" metrics="$4"
  shift 4
  RUST_LOG=warn "$BIN/floodgate" serve --config "$WORK/config" --worker-threads "$WORKER_THREADS" \
    --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
    --metrics-addr "127.0.0.1:$metrics" "$@" >"$WORK/$name.log" 2>&1 &
  SERVED_PID=$!
  PIDS+=("$SERVED_PID")
  wait_port "$name" "$SERVED_PID" "$grpc" "$WORK/$name.log"
}
REDIS_FLAGS=(--store redis --redis-url "redis://127.0.0.1:$REDIS_PORT/0"
  --redis-timeout-ms "$REDIS_TIMEOUT_MS")
# One script call per decision: the mode the sections before "Batching" measure.
serve floodgate "$GRPC_PORT" "$HTTP_PORT" "$METRICS_PORT" "${REDIS_FLAGS[@]}" --redis-batch-max 1
FLOODGATE_PID="$SERVED_PID"
serve floodgate-batch "$BATCH_GRPC_PORT" "$BATCH_HTTP_PORT" "$BATCH_METRICS_PORT" \
  "${REDIS_FLAGS[@]}" --redis-batch-max "$BATCH_MAX"
BATCH_PID="$SERVED_PID"
serve floodgate-memory "$MEMORY_GRPC_PORT" "$MEMORY_HTTP_PORT" "$MEMORY_METRICS_PORT" --store memory
MEMORY_PID="$SERVED_PID"

# The floor, on the same runtime as floodgate and the same redis-server (its counters have keys
# of their own).
"$BIN/examples/noop_rls" --addr "127.0.0.1:$FLOOR_PORT" --worker-threads "$WORKER_THREADS" \
  --redis-url "redis://127.0.0.1:$REDIS_PORT/0" >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
PIDS+=("$FLOOR_PID")
wait_port noop_rls "$FLOOR_PID" "$FLOOR_PORT" "$WORK/floor.log"

drive() { # SERVER PORT NAME ARGS…
  local server="$1" port="$2" name="$3"
  shift 3
  echo "bench-redis: $server, $name" >&2
  "$BIN/examples/loadgen" --addr "http://127.0.0.1:$port" --label "$server" \
    --domain edge --descriptor 'generic_key=api,client_id={key}' --keys "$KEYS" \
    --duration "${RUN_SECONDS:-$SECONDS_PER_RUN}s" --json "$WORK/$name.json" "$@" >"$WORK/$name.txt"
  sed 's/^/    /' "$WORK/$name.txt" >&2
}
loadgen() { drive floodgate "$GRPC_PORT" "$@"; }
floor() { drive floor "$FLOOR_PORT" "$@"; }
batched() { drive floodgate-batch "$BATCH_GRPC_PORT" "$@"; }
memory() { drive floodgate-memory "$MEMORY_GRPC_PORT" "$@"; }

# CPU seconds a process has used so far (utime + stime).
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }
# Decisions a floodgate (the one on metrics port $1, by default the first) has admitted so far
# (every call is admitted: the limit is never reached).
admitted() {
  curl -fsS "http://127.0.0.1:${1:-$METRICS_PORT}/metrics" |
    awk '/^floodgate_requests_allowed_total[{ ]/ {sum += $NF} END {printf "%d", sum}'
}
# Script calls Redis has run so far: the floor's decisions (it has no metrics of its own).
script_calls() {
  redis-cli -p "$REDIS_PORT" INFO commandstats |
    awk -F'[=,:]' '/^cmdstat_evalsha:/ {printf "%d", $3}'
}
# The µs Redis has spent running the script so far (its own count, without reading and writing
# the sockets).
script_usec() {
  redis-cli -p "$REDIS_PORT" INFO commandstats |
    awk -F'[=,:]' '/^cmdstat_evalsha:/ {printf "%d", $5}'
}
# floodgate's own latency histograms (decision, and Redis round trip) as they stand.
latency_buckets() {
  curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" |
    grep -E '^floodgate_(decision_duration_seconds_bucket[{]|store_duration_seconds_bucket[{]backend="redis")' ||
    true
}
# Runs "$@" and records, as NAME.cpu, the CPU redis-server and the server used meanwhile, the
# decisions made, the script calls Redis ran and the µs it spent in them; as NAME.hist0 and NAME.hist1, floodgate's
# histograms before and after. The server is floodgate, the floor with FLOOR=1, or the
# floodgate of SERVER=batch or SERVER=memory.
with_cpu() { # NAME COMMAND…
  local name="$1" server="$FLOODGATE_PID" metrics="$METRICS_PORT" decisions=admitted
  local redis0 server0 decided0 calls0 usec0
  case "${SERVER:-}" in
    batch) server="$BATCH_PID" metrics="$BATCH_METRICS_PORT" ;;
    memory) server="$MEMORY_PID" metrics="$MEMORY_METRICS_PORT" ;;
  esac
  if [ "${FLOOR:-}" = 1 ]; then
    server="$FLOOR_PID"
    decisions=script_calls
  fi
  shift
  redis0="$(cpu_seconds "$REDIS_PID")"
  server0="$(cpu_seconds "$server")"
  decided0="$("$decisions" "$metrics")"
  calls0="$(script_calls)"
  usec0="$(script_usec)"
  latency_buckets >"$WORK/$name.hist0"
  "$@"
  echo "$(cpu_seconds "$REDIS_PID") $redis0 $(cpu_seconds "$server") $server0" \
    "$("$decisions" "$metrics") $decided0 $(script_calls) $calls0 $(script_usec) $usec0" \
    >"$WORK/$name.cpu"
  latency_buckets >"$WORK/$name.hist1"
}

# How steady the machine is: the same single-threaded loop timed five times while nothing
# else of ours runs, before and after the measurements. On a shared host (a VM whose cores
# have noisy neighbours) the spread shows how far the figures below can move between runs.
steadiness() { # NAME
  python3 - >"$WORK/$1.steady" <<'PY'
import time
for _ in range(5):
    start = time.perf_counter()
    total = 0
    for i in range(1_000_000):
        total += i * i
    print(f"{time.perf_counter() - start:.4f}")
PY
}
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }
steadiness steady-before
STEAL0="$(steal_ticks)"

# The same script and the same kind of call, from redis-benchmark. Its keys get a random
# suffix (-r) so that, as under loadgen, KEYS counters share the load.
"$BIN/examples/redis_script" source >"$WORK/script.lua"
SHA="$(redis-cli -p "$REDIS_PORT" SCRIPT LOAD "$(cat "$WORK/script.lua")")"
mapfile -t CALL < <("$BIN/examples/redis_script" call "$LIMIT")
NUMKEYS="${CALL[0]}"
[ "$NUMKEYS" = 1 ] || die "expected one key, got $NUMKEYS"
KEY="${CALL[1]}:__rand_int__"
ARGS=("${CALL[@]:2}")
# Check that the call works before measuring it (reply: one admitted counter).
redis-cli -p "$REDIS_PORT" EVALSHA "$SHA" 1 "${CALL[1]}:check" "${ARGS[@]}" >"$WORK/check.txt" ||
  die "EVALSHA failed: $(cat "$WORK/check.txt")"

benchmark() { # NAME PIPELINE REQUESTS
  echo "bench-redis: redis-benchmark EVALSHA, -P $2" >&2
  local redis0 calls0 usec0
  redis0="$(cpu_seconds "$REDIS_PID")"
  calls0="$(script_calls)"
  usec0="$(script_usec)"
  redis-benchmark -p "$REDIS_PORT" -c "$CLIENTS" -n "$3" -r "$KEYS" -P "$2" --csv \
    EVALSHA "$SHA" 1 "$KEY" "${ARGS[@]}" >"$WORK/$1.csv"
  # What the calls cost redis-server: CPU seconds, script calls and script µs, after and before.
  echo "$(cpu_seconds "$REDIS_PID") $redis0 $(script_calls) $calls0 $(script_usec) $usec0" \
    >"$WORK/$1.redis"
  sed 's/^/    /' "$WORK/$1.csv" >&2
}

# The same decisions from h2load, a load generator in C that costs the shared CPUs far less
# than loadgen: one gRPC request body (one counter), CLIENTS calls in flight laid out two ways:
# CLIENTS connections with one call each (like redis-benchmark's clients), and CLIENTS/10
# connections with 10 calls each (how Envoy calls a rate-limit service: one HTTP/2 connection
# per worker thread, many calls on each). The rate counted is floodgate's own admitted
# decisions (a gRPC error would still be HTTP 200 to h2load).
h2load_request() {
  python3 - "$WORK/request.grpc" <<'PY'
import sys
def varint(n):
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)
def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload
def entry(key, value):
    return field(1, key.encode()) + field(2, value.encode())
descriptor = field(1, entry("generic_key", "api")) + field(1, entry("client_id", "h2load"))
request = field(1, b"edge") + field(2, descriptor) + bytes([3 << 3, 1])  # hits_addend: 1
open(sys.argv[1], "wb").write(b"\0" + len(request).to_bytes(4, "big") + request)
PY
}
h2load_run() { # NAME CONNECTIONS STREAMS-PER-CONNECTION
  echo "bench-redis: floodgate, h2load -c $2 -m $3" >&2
  with_cpu "$1" h2load -D "$SECONDS_PER_RUN" -c "$2" -m "$3" -d "$WORK/request.grpc" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$GRPC_PORT/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" \
    >"$WORK/$1.txt" 2>&1 || die "h2load failed: $(tail -3 "$WORK/$1.txt")"
  sed 's/^/    /' "$WORK/$1.txt" | grep -E 'finished in|requests:|status codes' >&2 || true
}
# Peak: floodgate, the floor and h2load in closed loop, between two runs of redis-benchmark
# without pipelining, so that the ratios compare figures taken within a minute of each other
# (this kind of host can change speed by a third from one minute to the next).
benchmark evalsha 1 "$REQUESTS"
with_cpu peak loadgen peak --max-rate --concurrency "$CLIENTS"
FLOOR=1 with_cpu floor-peak floor floor-peak --max-rate --concurrency "$CLIENTS"
H2_STREAMS=$((CLIENTS >= 10 ? 10 : 1))
H2_CONNECTIONS=$(((CLIENTS + H2_STREAMS - 1) / H2_STREAMS))
if command -v h2load >/dev/null; then
  h2load_request
  h2load_run h2load-flat "$CLIENTS" 1
  h2load_run h2load-envoy "$H2_CONNECTIONS" "$H2_STREAMS"
else
  echo "bench-redis: h2load not found (Debian: apt-get install nghttp2-client); its row is skipped" >&2
fi
benchmark evalsha-after 1 "$REQUESTS"
# Batching: the three floodgates at peak, back to back in the order one call, batches, memory,
# memory, batches, one call, so that each mode has a run early and a run late.
for run in one-1 batch-1 memory-1 memory-2 batch-2 one-2; do
  mode="${run%-*}"
  case "$mode" in
    one) with_cpu "mode-$run" loadgen "mode-$run" --max-rate --concurrency "$CLIENTS" ;;
    batch) SERVER=batch with_cpu "mode-$run" batched "mode-$run" --max-rate --concurrency "$CLIENTS" ;;
    memory) SERVER=memory with_cpu "mode-$run" memory "mode-$run" --max-rate --concurrency "$CLIENTS" ;;
  esac
done
# A tenth of the one-call peak, open loop, Poisson: one call, batches, memory, memory,
# batches, one call, back to back: the latency a lone request pays for batching, if any, and
# floodgate's own CPU per decision in each mode at the same offered rate (at peak each mode
# runs at its own rate, which moves its CPU per decision by itself).
TENTH="$(python3 -c "import json
rates = [json.load(open(f'$WORK/mode-one-{n}.json'))['total']['legit']['achieved_rps'] for n in (1, 2)]
print(max(1, int(sum(rates) / 2 / 10)))")"
for run in one-1 batch-1 memory-1 memory-2 batch-2 one-2; do
  case "${run%-*}" in
    one) RUN_SECONDS="$TENTH_SECONDS" with_cpu "tenth-$run" loadgen "tenth-$run" \
      --rate "$TENTH" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s ;;
    batch) RUN_SECONDS="$TENTH_SECONDS" SERVER=batch with_cpu "tenth-$run" batched "tenth-$run" \
      --rate "$TENTH" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s ;;
    memory) RUN_SECONDS="$TENTH_SECONDS" SERVER=memory with_cpu "tenth-$run" memory "tenth-$run" \
      --rate "$TENTH" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s ;;
  esac
done
# Half of the one-call peak, the same way for batches and the memory store (batches, memory,
# memory, batches): at that rate a call carries several decisions, so what the Redis call costs
# floodgate per decision is shared; at a tenth nearly every decision pays it alone.
SAME_HALF="$((TENTH * 5))"
for run in batch-1 memory-1 memory-2 batch-2; do
  case "${run%-*}" in
    batch) RUN_SECONDS="$TENTH_SECONDS" SERVER=batch with_cpu "samehalf-$run" batched "samehalf-$run" \
      --rate "$SAME_HALF" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s ;;
    memory) RUN_SECONDS="$TENTH_SECONDS" SERVER=memory with_cpu "samehalf-$run" memory \
      "samehalf-$run" --rate "$SAME_HALF" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s ;;
  esac
done
RATE="$(python3 -c "import json; print(max(1, int(json.load(open('$WORK/peak.json'))['total']['legit']['achieved_rps'] / 2)))")"
# Half of peak, open loop, twice: evenly spaced requests, then Poisson arrivals (independent
# callers). The cap on calls in flight is far above what the rate needs, so no request is
# shed: a shed request has no latency, and dropping the slowest moments would flatter p99.
# Each Poisson run of floodgate is followed by the floor's at the same rate, so that both see
# the host in much the same state; at half of peak, twice, in the order floodgate, floor, floor,
# floodgate, so that neither always goes first.
for arrivals in even poisson; do
  with_cpu "half-$arrivals" loadgen "half-$arrivals" --rate "$RATE" --arrivals "$arrivals" \
    --concurrency "$HALF_CAP" --warmup 0s
done
FLOOR=1 with_cpu floor-half floor floor-half --rate "$RATE" --arrivals poisson \
  --concurrency "$HALF_CAP" --warmup 0s
floor floor-half-2 --rate "$RATE" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s
loadgen half-poisson-2 --rate "$RATE" --arrivals poisson --concurrency "$HALF_CAP" --warmup 0s
# Lower rates, Poisson: where p99 stands as the load falls (an eighth, a quarter and three
# eighths of peak; half is above).
for eighths in 1 2 3; do
  loadgen "eighths-$eighths" --rate "$((RATE * eighths / 4))" --arrivals poisson \
    --concurrency "$HALF_CAP" --warmup 0s
  floor "floor-eighths-$eighths" --rate "$((RATE * eighths / 4))" --arrivals poisson \
    --concurrency "$HALF_CAP" --warmup 0s
done
kill -0 "$FLOODGATE_PID" 2>/dev/null || die "floodgate died during the benchmark"
kill -0 "$FLOOR_PID" 2>/dev/null || die "noop_rls (the floor) died during the benchmark"
kill -0 "$BATCH_PID" 2>/dev/null || die "the batching floodgate died during the benchmark"
kill -0 "$MEMORY_PID" 2>/dev/null || die "the memory-store floodgate died during the benchmark"
read -r _ _ _ _ FLOOR_CALLS FLOOR_CALLS0 _ _ _ _ <"$WORK/floor-peak.cpu"
[ "$FLOOR_CALLS" -gt "$FLOOR_CALLS0" ] || die "the floor ran no script in Redis: see $WORK/floor.log"

benchmark evalsha-pipelined "$PIPELINE" "$((REQUESTS * 3))"
STEAL="$(($(steal_ticks) - STEAL0))"
steadiness steady-after

mkdir -p "$(dirname "$OUT")"
BENCH_BATCH_MAX="$BATCH_MAX" BENCH_CLIENTS="$CLIENTS" BENCH_SECONDS="$SECONDS_PER_RUN" \
  BENCH_WORKER_THREADS="$WORKER_THREADS" BENCH_TENTH="$TENTH" BENCH_TENTH_SECONDS="$TENTH_SECONDS" \
  BENCH_SAME_HALF="$SAME_HALF" python3 scripts/lib/bench-redis-batching.py "$WORK" >"$WORK/batching.md"
BENCH_WORK="$WORK" BENCH_PROVENANCE="$(report_provenance scripts/bench-redis.sh)" \
BENCH_NPROC="$(nproc)" \
BENCH_REDIS="$(redis-server --version | awk '{print $3}')" BENCH_CLIENTS="$CLIENTS" \
BENCH_KEYS="$KEYS" BENCH_SECONDS="$SECONDS_PER_RUN" BENCH_PIPELINE="$PIPELINE" \
BENCH_RATE="$RATE" BENCH_HALF_CAP="$HALF_CAP" BENCH_LIMIT="$LIMIT" BENCH_H2_CONNECTIONS="$H2_CONNECTIONS" \
BENCH_H2_STREAMS="$H2_STREAMS" BENCH_WORKER_THREADS="$WORKER_THREADS" BENCH_REDIS_TIMEOUT_MS="$REDIS_TIMEOUT_MS" \
BENCH_STEAL_S="$(awk -v t="$STEAL" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}')" \
BENCH_BREAKER_OPENED="$(grep -c 'Redis circuit open' "$WORK/floodgate.log" || true)" \
BENCH_BATCH_MAX="$BATCH_MAX" \
python3 - "$OUT" <<'EOF'
import csv, json, os, sys

env = os.environ
work = env["BENCH_WORK"]


def loadgen_report(name):
    with open(f"{work}/{name}.json") as f:
        return json.load(f)


def loadgen(name):
    return loadgen_report(name)["total"]["legit"]


def bench(name):
    with open(f"{work}/{name}.csv") as f:
        rows = list(csv.DictReader(f))
    return rows[0]


def us(v):
    return "–" if v is None else f"{v:,}"


def cpu(name):
    """(redis-server CPU s, floodgate CPU s, decisions) during run NAME, or None."""
    try:
        with open(f"{work}/{name}.cpu") as f:
            redis1, redis0, floodgate1, floodgate0, admitted1, admitted0 = map(
                float, f.read().split()[:6])
    except FileNotFoundError:
        return None
    return redis1 - redis0, floodgate1 - floodgate0, int(admitted1 - admitted0)


def h2load(name):
    """floodgate's decisions/s under h2load run NAME, or None when it did not run."""
    used = cpu(name)
    return None if used is None else used[2] / int(env["BENCH_SECONDS"])


peak = loadgen("peak")
h2_flat, h2_envoy = h2load("h2load-flat"), h2load("h2load-envoy")
plain, plain_after, piped = bench("evalsha"), bench("evalsha-after"), bench("evalsha-pipelined")
# The ceiling the closed-loop runs are read against: the mean of the runs before and after them.
plain_rps = (float(plain["rps"]) + float(plain_after["rps"])) / 2
piped_rps = float(piped["rps"])
lines = []
w = lines.append
w("# Redis store benchmark: floodgate decisions vs redis-benchmark EVALSHA")
w("")
w(env["BENCH_PROVENANCE"])
w("")
w(f"- redis-server {env['BENCH_REDIS']}")
w("- **everything shares these CPUs**: redis-server, floodgate and loadgen (or "
  "redis-benchmark). Read the ratios, not the absolute figures.")
w(f"- one decision = **one round trip** to Redis: one `EVALSHA` of the store's script "
  f"(a fixed window of {int(env['BENCH_LIMIT']):,} per minute, so every call is admitted and "
  "writes its counter).")
w(f"- floodgate: `--store redis --redis-batch-max 1 --worker-threads {env['BENCH_WORKER_THREADS']}` "
  "(one script call per decision; [Batching](#batching---redis-batch-max-"
  f"{env['BENCH_BATCH_MAX']}) compares it with batches), loadgen over gRPC with {env['BENCH_CLIENTS']} requests in "
  f"flight, `{{key}}` from {int(env['BENCH_KEYS']):,} values, {env['BENCH_SECONDS']} s per run.")
w(f"- redis-benchmark: {env['BENCH_CLIENTS']} clients, the same script loaded with `SCRIPT "
  "LOAD`, the same keys and arguments as the store sends (`examples/redis_script.rs`), key "
  f"suffixed with one of {int(env['BENCH_KEYS']):,} random numbers (`-r`).")
w("")
w("| what | calls/s | ratio: floodgate ÷ this | errors |")
w("|---|--:|--:|--:|")
w(f"| floodgate decisions (closed loop, {env['BENCH_CLIENTS']} in flight) | "
  f"{peak['achieved_rps']:,.0f} | 1.00 | {peak['error']:,} |")
for rate, layout in [
    (h2_flat, f"{env['BENCH_CLIENTS']} connections × 1 call"),
    (h2_envoy, f"{env['BENCH_H2_CONNECTIONS']} connections × {env['BENCH_H2_STREAMS']} calls, "
     "as Envoy connects"),
]:
    if rate:
        w(f"| floodgate decisions under h2load ({layout}) | {rate:,.0f} | "
          f"{rate / plain_rps:.2f} of redis-benchmark without pipelining | |")
w(f"| redis-benchmark EVALSHA, no pipelining: mean of the runs before and after the rows "
  f"above ({float(plain['rps']):,.0f} before, {float(plain_after['rps']):,.0f} after) | "
  f"{plain_rps:,.0f} | {peak['achieved_rps'] / plain_rps:.2f} | |")
w(f"| redis-benchmark EVALSHA, `-P {env['BENCH_PIPELINE']}` | {piped_rps:,.0f} | "
  f"{peak['achieved_rps'] / piped_rps:.2f} | |")
w("")
w("**Who uses the CPUs.** Two cores serve redis-server, floodgate and the load generator at "
  "once, so a costlier generator leaves less for the other two. CPU time per decision during "
  "the closed-loop runs (from `/proc/<pid>/stat`):")
w("")
w("| run | decisions | redis-server µs/decision | floodgate µs/decision |")
w("|---|--:|--:|--:|")
for label, name in [("loadgen (Rust, h2)", "peak"), ("h2load, 1 call per connection", "h2load-flat"),
                    ("h2load, as Envoy connects", "h2load-envoy")]:
    used = cpu(name)
    if used and used[2]:
        redis_s, floodgate_s, decisions = used
        w(f"| {label} | {decisions:,} | {redis_s / decisions * 1e6:,.1f} | "
          f"{floodgate_s / decisions * 1e6:,.1f} |")
w("")
w("The h2load rows compare floodgate with redis-benchmark using a client closer to "
  "redis-benchmark's cost (one counter rather than the loadgen's spread of keys, which costs "
  "Redis the same GET and SET); the loadgen row also carries the Rust gRPC client's own CPU "
  "on the same two cores. Whatever the client leaves of the two cores is shared by "
  "redis-server and floodgate.")
w("")
w(f"floodgate ran with `--redis-timeout-ms {env['BENCH_REDIS_TIMEOUT_MS']}`; *errors* are "
  "decisions that missed that deadline (gRPC UNAVAILABLE under the default failure policy "
  "`error`). The circuit breaker opened "
  f"{env['BENCH_BREAKER_OPENED']} time(s) during the runs.")
w("")
w("The rows above ran one after the other within about a minute, between the two runs of "
  "redis-benchmark without pipelining; the pipelined run came at the end.")
w("")
w("Without pipelining, redis-benchmark waits for each reply before the next call on a "
  "connection: the ceiling for one round trip per decision at this concurrency. floodgate "
  "multiplexes every decision over one connection, so Redis sees them pipelined; the "
  "pipelined figure is what Redis alone can do with the script.")
w("")
w(f"## Latency at half of floodgate's peak ({int(env['BENCH_RATE']):,} decisions/s, open loop)")
w("")
w("loadgen sends each request when it is due (a timerfd, not tokio's 1 ms timer, so requests "
  f"do not leave in per-millisecond bursts), with up to {env['BENCH_HALF_CAP']} calls in flight "
  "so that none is shed; latency is client-side, from sending to the whole answer.")
w("")
w("| arrivals | achieved/s | p50 µs | p90 µs | p99 µs | max µs | errors | shed |")
w("|---|--:|--:|--:|--:|--:|--:|--:|")
for arrivals, name in [("evenly spaced", "half-even"), ("Poisson", "half-poisson"),
                       ("Poisson, again after the floor's two runs", "half-poisson-2")]:
    half = loadgen(name)
    w(f"| {arrivals} | {half['achieved_rps']:,.0f} | {us(half['p50_us'])} "
      f"| {us(half['p90_us'])} | {us(half['p99_us'])} | {us(half['max_us'])} | "
      f"{half['error']:,} | {half['shed']:,} |")
w("")


def slower_than(name, metric):
    """{bound in s: share of the run's calls slower than it} from floodgate's histogram."""
    def buckets(path):
        counts = {}
        with open(path) as f:
            for line in f:
                if not line.startswith(metric + "_bucket{"):
                    continue
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                counts[float("inf") if bound == "+Inf" else float(bound)] = float(line.split()[-1])
        return counts
    try:
        before, after = buckets(f"{work}/{name}.hist0"), buckets(f"{work}/{name}.hist1")
    except FileNotFoundError:
        return {}
    total = after.get(float("inf"), 0) - before.get(float("inf"), 0)
    if total <= 0:
        return {}
    return {bound: 1 - (after[bound] - before.get(bound, 0)) / total for bound in after}


w("**What floodgate itself measured** in those runs (its `floodgate_decision_duration_seconds` "
  "and `floodgate_store_duration_seconds` histograms): the share of calls slower than each "
  "bound. The client-side p99 above adds what happens outside floodgate's handler: the "
  "loadgen and floodgate waiting for a CPU to read and write the sockets.")
w("")
w("| arrivals | histogram | > 0.5 ms | > 1 ms | > 2.5 ms | > 5 ms |")
w("|---|---|--:|--:|--:|--:|")
for arrivals, name in [("evenly spaced", "half-even"), ("Poisson", "half-poisson")]:
    for label, metric in [("decision", "floodgate_decision_duration_seconds"),
                          ("Redis round trip", "floodgate_store_duration_seconds")]:
        shares = slower_than(name, metric)
        if shares:
            w(f"| {arrivals} | {label} | " + " | ".join(
                f"{shares.get(bound, 0) * 100:.2f} %" for bound in (0.0005, 0.001, 0.0025, 0.005))
              + " |")
w("")
w("**As the load falls** (Poisson arrivals, same settings):")
w("")
w("| share of peak | decisions/s | p50 µs | p90 µs | p99 µs | max µs | errors | shed |")
w("|---|--:|--:|--:|--:|--:|--:|--:|")
for share, name in [("1/8", "eighths-1"), ("1/4", "eighths-2"), ("3/8", "eighths-3"),
                    ("1/2", "half-poisson")]:
    run = loadgen(name)
    w(f"| {share} | {run['achieved_rps']:,.0f} | {us(run['p50_us'])} | {us(run['p90_us'])} "
      f"| {us(run['p99_us'])} | {us(run['max_us'])} | {run['error']:,} | {run['shed']:,} |")
w("")
w("## Against the floor")
w("")
w("The floor is what any rate-limit service that asks Redis once per call costs here: "
  "`examples/noop_rls.rs --redis-url`, a tonic server on the same runtime as floodgate "
  f"(`--worker-threads {env['BENCH_WORKER_THREADS']}`) that runs the same `EVALSHA` on one "
  "multiplexed connection and answers OK, with no rule matching, metrics, admission control, "
  "deadline or circuit breaker. Same redis-server, same loadgen settings; each floor run comes "
  "right after floodgate's at the same rate, so both meet the host in much the same state (at "
  "half of peak twice, floodgate, floor, floor, floodgate). "
  "floodgate cannot be faster than its floor: the gap between the two is what floodgate "
  "itself costs, and the floor's own p99 is what this machine allows.")
w("")
w("| load | floodgate/s | floodgate p50 µs | floodgate p99 µs | floor/s | floor p50 µs "
  "| floor p99 µs | p99: floodgate ÷ floor (sum of runs) |")
w("|---|--:|--:|--:|--:|--:|--:|--:|")
floor_peak = loadgen("floor-peak")
w(f"| peak, closed loop ({env['BENCH_CLIENTS']} in flight) | {peak['achieved_rps']:,.0f} "
  f"| {us(peak['p50_us'])} | {us(peak['p99_us'])} | {floor_peak['achieved_rps']:,.0f} "
  f"| {us(floor_peak['p50_us'])} | {us(floor_peak['p99_us'])} "
  f"| throughput {peak['achieved_rps'] / floor_peak['achieved_rps']:.2f}× the floor's |")


def each(runs, field, fmt):
    """FIELD of each run, formatted, separated by slashes."""
    return " / ".join("–" if run[field] is None else fmt(run[field]) for run in runs)


for share, ours, theirs in [("1/8 of peak", ["eighths-1"], ["floor-eighths-1"]),
                            ("1/4", ["eighths-2"], ["floor-eighths-2"]),
                            ("3/8", ["eighths-3"], ["floor-eighths-3"]),
                            ("1/2, run 1 and 2", ["half-poisson", "half-poisson-2"],
                             ["floor-half", "floor-half-2"])]:
    a, b = [loadgen(name) for name in ours], [loadgen(name) for name in theirs]
    p99s_a, p99s_b = [run["p99_us"] for run in a], [run["p99_us"] for run in b]
    ratio = (f"{sum(p99s_a) / sum(p99s_b):.2f}" if all(p99s_a) and all(p99s_b) else "–")
    w(f"| {share}, Poisson | {each(a, 'achieved_rps', lambda v: f'{v:,.0f}')} "
      f"| {each(a, 'p50_us', us)} | {each(a, 'p99_us', us)} "
      f"| {each(b, 'achieved_rps', lambda v: f'{v:,.0f}')} | {each(b, 'p50_us', us)} "
      f"| {each(b, 'p99_us', us)} | {ratio} |")
w("")
w("Server CPU per decision (µs, from `/proc/<pid>/stat`):")
w("")
w("| run | floodgate | floor | redis-server under floodgate | redis-server under the floor |")
w("|---|--:|--:|--:|--:|")
for label, ours, theirs in [("peak", "peak", "floor-peak"), ("half, Poisson", "half-poisson",
                                                             "floor-half")]:
    a, b = cpu(ours), cpu(theirs)
    if a and b and a[2] and b[2]:
        w(f"| {label} | {a[1] / a[2] * 1e6:,.1f} | {b[1] / b[2] * 1e6:,.1f} "
          f"| {a[0] / a[2] * 1e6:,.1f} | {b[0] / b[2] * 1e6:,.1f} |")
w("")
w("**CPU per decision, peak against half of peak** (µs; loadgen's own from its report):")
w("")
w("| run | redis-server | floodgate | loadgen | all three × decisions/s = cores busy |")
w("|---|--:|--:|--:|--:|")
for label, name in [("peak (closed loop)", "peak"), ("half, evenly spaced", "half-even"),
                    ("half, Poisson", "half-poisson")]:
    used, report = cpu(name), loadgen_report(name)
    if not used or not used[2]:
        continue
    redis_s, floodgate_s, decisions = used
    loadgen_s = report.get("loadgen_cpu_s") or 0.0
    total_us = (redis_s + floodgate_s + loadgen_s) / decisions * 1e6
    rate = report["total"]["legit"]["achieved_rps"]
    w(f"| {label} | {redis_s / decisions * 1e6:,.1f} | {floodgate_s / decisions * 1e6:,.1f} | "
      f"{loadgen_s / decisions * 1e6:,.1f} | {total_us * rate / 1e6:.2f} of "
      f"{env['BENCH_NPROC']} |")
w("")
w("At peak every process finds many calls waiting each time it wakes; at half of peak calls "
  "arrive one at a time, so each costs its own wake-ups and system calls in all three "
  "processes, and the CPU per decision rises accordingly.")
w("")
w(f"redis-benchmark's own latency (ms, at its peak): no pipelining p50 {plain['p50_latency_ms']} "
  f"p99 {plain['p99_latency_ms']}; `-P {env['BENCH_PIPELINE']}` p50 {piped['p50_latency_ms']} "
  f"p99 {piped['p99_latency_ms']}.")
w("")
with open(f"{work}/batching.md") as f:
    w(f.read().rstrip("\n"))
w("")
w("## How steady the machine was")
w("")


def timings(name):
    with open(f"{work}/{name}.steady") as f:
        return [float(line) for line in f if line.strip()]


before, after = timings("steady-before"), timings("steady-after")
every = before + after
w("The same single-threaded loop (a million multiply-adds in Python), timed five times before "
  "the runs and five times after, with nothing else of this benchmark running: "
  f"{min(before):.3f}–{max(before):.3f} s before, {min(after):.3f}–{max(after):.3f} s after; "
  f"the slowest took {max(every) / min(every):.2f}× the fastest. CPU time stolen by the "
  f"hypervisor during the runs (`/proc/stat`): {env['BENCH_STEAL_S']} s. A spread well above "
  "1.1× means the host's other tenants were slowing these CPUs; tail latencies then move "
  "between runs more than any change to floodgate does.")
w("")
w("## Reproduce")
w("")
w("```")
w("scripts/bench-redis.sh   # BENCH_* variables override the settings (see the script's header)")
w("```")
with open(sys.argv[1], "w") as f:
    f.write("\n".join(lines) + "\n")
EOF
echo "bench-redis: wrote $OUT" >&2
