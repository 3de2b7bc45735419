#!/usr/bin/env bash
# Soak: floodgate under steady load for a long time, once per store, looking for leaks. Each
# store gets its own floodgate (and, for Redis, its own redis-server on a free loopback port):
#   1. its peak, a closed-loop examples/loadgen run (BENCH_PEAK_SECONDS);
#   2. then open-loop load at half of that peak (BENCH_SOAK_FRACTION) for --minutes, one loadgen run per minute of six
#      10 s stages, each minute's keys new (`m<minute>-<key>`): the key space churns, the last
#      minute's counters expire (the rule's window is one minute) and new ones are made;
#   3. every minute, half-way through, the rules file is rewritten (the limit moves by one), a
#      reload that floodgate must take (floodgate_config_load_success_total is checked);
#   4. every 10 s: floodgate's RSS (and its anonymous and file-backed parts) and open file
#      descriptors (/proc), the stage's p99 and its
#      ratio to the first minute's median, errors, and Redis's key count and memory.
# Flat means: after the warm-up (the first BENCH_WARMUP_MINUTES), RSS and descriptors stay
# within 10 % of their first post-warm-up sample. Settled (the report's other judgement): the
# first minute from which every later minute's median RSS and descriptors stay within 10 % of
# that minute's, within the first quarter of the run: the warm-up read from the run (a store
# grows its tables to the churning key space's high-water; a leak never settles). p99 is
# reported, not judged (the host drifts).
#
#   scripts/soak.sh                   # an hour per store (two hours), writes docs/soak.md
#   scripts/soak.sh --minutes 10      # a shorter run
#   scripts/soak.sh --store redis     # one store only (memory, redis or both)
#
# Overrides (environment):
#   BENCH_PEAK_SECONDS     length of the peak run, seconds                [10]
#   BENCH_CONCURRENCY      loadgen concurrency at peak                    [64]
#   BENCH_KEYS             distinct keys per minute                       [20000]
#   BENCH_WARMUP_MINUTES   minutes left out of the flatness judgement     [2, or 1 for runs under 5]
#   BENCH_REDIS_TIMEOUT_MS floodgate --redis-timeout-ms                   [100]
#   BENCH_SOAK_FRACTION    the soak's rate as a fraction of the peak      [0.5]
#     (the peak is closed loop, 64 in flight; calls that arrive one by one cost every process
#     more, so on 2 shared vCPUs the Redis store's half of it queues: a leak is judged at a
#     rate the host answers on time)
#   BENCH_OUT              the report                                     [docs/soak.md]
# Loopback only; every process it starts is stopped by pid when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

MINUTES=60
STORES="memory redis"
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES="${2:-}"; shift 2 ;;
    --minutes=*) MINUTES="${1#*=}"; shift ;;
    --store) STORES="${2:-}"; shift 2 ;;
    --store=*) STORES="${1#*=}"; shift ;;
    -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "soak: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$STORES" = both ] && STORES="memory redis"
PEAK_SECONDS="${BENCH_PEAK_SECONDS:-10}"
CONCURRENCY="${BENCH_CONCURRENCY:-64}"
KEYS="${BENCH_KEYS:-20000}"
REDIS_TIMEOUT_MS="${BENCH_REDIS_TIMEOUT_MS:-100}"
OUT="${BENCH_OUT:-docs/soak.md}"
FRACTION="${BENCH_SOAK_FRACTION:-0.5}"

die() { echo "soak: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
[[ "$MINUTES" =~ ^[1-9][0-9]*$ ]] || die "--minutes must be a whole number of minutes (got '$MINUTES')"
if [ "$MINUTES" -lt 5 ]; then WARMUP_MINUTES="${BENCH_WARMUP_MINUTES:-1}"; else WARMUP_MINUTES="${BENCH_WARMUP_MINUTES:-2}"; fi
[[ "$WARMUP_MINUTES" =~ ^[0-9]+$ && "$WARMUP_MINUTES" -lt "$MINUTES" ]] ||
  die "BENCH_WARMUP_MINUTES must be a whole number below --minutes"
[[ "$FRACTION" =~ ^0?\.[0-9]+$|^1(\.0*)?$ ]] && [[ ! "$FRACTION" =~ ^0?\.0*$ ]] ||
  die "BENCH_SOAK_FRACTION must be a fraction above 0 and at most 1 (got '$FRACTION')"
for value in "$PEAK_SECONDS" "$CONCURRENCY" "$KEYS" "$REDIS_TIMEOUT_MS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_* settings must be whole numbers (got '$value')"
done
for store in $STORES; do
  case "$store" in memory | redis) ;; *) die "--store takes memory, redis or both (got '$store')" ;; esac
done
for tool in python3 redis-server redis-cli; do
  command -v "$tool" >/dev/null || die "$tool is needed"
done

start_workspace soak
release_build soak --bin floodgate --example loadgen
FLOODGATE="$BIN/floodgate"
LOADGEN="$BIN/examples/loadgen"
# Everything the soak starts besides floodgate (redis-server, the samplers, loadgen).
EXTRA_PIDS=()
cleanup_extra() {
  local pid
  for pid in "${EXTRA_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${EXTRA_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  EXTRA_PIDS=()
}
trap 'cleanup_extra; stop_workspace' EXIT

# rules LIMIT: the soak's rules, a per-minute limit on each churning key (high enough that a
# key at this load is rarely over: every call writes a counter) and a fixed key that is.
rules() {
  cat <<EOF
domain: soak
descriptors:
  - key: generic_key
    value: soak
    descriptors:
      - key: client_id
        rate_limit: {unit: minute, requests_per_unit: $1, algorithm: fixed_window}
  - key: generic_key
    value: hot
    rate_limit: {unit: second, requests_per_unit: 50, algorithm: token_bucket, burst: 50}
EOF
}

metric() { # metric PORT NAME: the value of an unlabelled metric on floodgate's debug port
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
port, name = sys.argv[1:]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
print(next((line.split()[-1] for line in text.splitlines() if line.startswith(name + " ")), "0"))
PY
}

# sampler PID REDIS_PORT METRICS_PORT CSV: every 10 s, "t_s,rss_kib,fds,redis_keys,
# redis_used_kib,load1,anon_kib,file_kib,in_flight": RSS and its two parts, the process's own
# memory (RssAnon, where a leak grows, and where calls queued in a backlog live) and the pages
# of the binary and libraries it has touched (RssFile, which climbs as code runs for the first
# time and stops at the code's size), and the calls being decided at that moment.
sampler() {
  local pid="$1" redis_port="$2" metrics_port="$3" csv="$4" start keys used
  start="$(date +%s.%N)"
  echo "t_s,rss_kib,fds,redis_keys,redis_used_kib,load1,anon_kib,file_kib,in_flight" >"$csv"
  while kill -0 "$pid" 2>/dev/null; do
    keys="" used=""
    if [ -n "$redis_port" ]; then
      keys="$(redis-cli -p "$redis_port" DBSIZE 2>/dev/null || true)"
      used="$(redis-cli -p "$redis_port" INFO memory 2>/dev/null | awk -F: '/^used_memory:/ {printf "%d", $2 / 1024}' || true)"
    fi
    echo "$(python3 -c "import time; print(f'{time.time() - $start:.1f}')"),$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"),$(ls "/proc/$pid/fd" | wc -l),$keys,$used,$(cut -d' ' -f1 /proc/loadavg),$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status"),$(awk '/^RssFile:/ {print $2}' "/proc/$pid/status"),$(metric "$metrics_port" floodgate_calls_in_flight 2>/dev/null || true)" >>"$csv"
    sleep 10
  done
}

# reloader CONFIG_FILE LIMIT LOG: every 60 s, 30 s into the minute, the limit moves by one.
reloader() {
  local file="$1" limit="$2" log="$3" turn=0
  sleep 30
  while true; do
    turn=$((turn + 1))
    rules $((limit + turn % 2)) >"$file.tmp"
    mv "$file.tmp" "$file"
    echo "$(date +%s) reload $turn" >>"$log"
    sleep 60
  done
}

soak_store() {
  local store="$1" dir="$WORK/$store" redis_port="" args=() peak rate minute
  mkdir -p "$dir/config"
  rules 1000000 >"$dir/config/soak.yaml"
  if [ "$store" = redis ]; then
    read -r redis_port < <(free_ports 1)
    start_redis "$redis_port" "$dir" "$dir/redis.log"
    EXTRA_PIDS+=("$REDIS_PID")
    args=(--store redis --redis-url "redis://127.0.0.1:$redis_port/0" --redis-timeout-ms "$REDIS_TIMEOUT_MS")
  fi
  start_floodgate "$FLOODGATE" "$dir/config" "$dir/floodgate.log" "${args[@]}"
  echo "soak: $store: peak ($PEAK_SECONDS s, concurrency $CONCURRENCY)" >&2
  "$LOADGEN" --addr "http://127.0.0.1:$GRPC_PORT" --domain soak \
    --descriptor "generic_key=soak,client_id=peak-{key}" --keys "$KEYS" --max-rate \
    --concurrency "$CONCURRENCY" --duration "${PEAK_SECONDS}s" --json "$dir/peak.json" \
    >"$dir/peak.txt" 2>&1 || die "$store: the peak run failed: $(tail -n 5 "$dir/peak.txt")"
  peak="$(python3 -c "import json; print(json.load(open('$dir/peak.json'))['total']['legit']['achieved_rps'])")"
  rate="$(python3 -c "print(max(1, int($peak * $FRACTION)))")"
  echo "soak: $store: peak $peak req/s; soaking at $rate req/s for $MINUTES min" >&2
  local loads_before
  loads_before="$(metric "$METRICS_PORT" floodgate_config_load_success_total)"
  sampler "$SERVER_PID" "$redis_port" "$METRICS_PORT" "$dir/samples.csv" &
  EXTRA_PIDS+=("$!")
  reloader "$dir/config/soak.yaml" 1000000 "$dir/reloads.log" &
  EXTRA_PIDS+=("$!")
  for minute in $(seq 1 "$MINUTES"); do
    kill -0 "$SERVER_PID" 2>/dev/null || die "$store: floodgate died in minute $minute: $(tail -n 20 "$dir/floodgate.log")"
    # Six 10 s stages at the rate: one p99 per sample. 1 in 20 calls on the hot key (over).
    "$LOADGEN" --addr "http://127.0.0.1:$GRPC_PORT" --domain soak \
      --mix "churn:19:generic_key=soak,client_id=m$minute-{key}" --mix "hot:1:generic_key=hot" \
      --keys "$KEYS" --start-rate "$rate" --stages "10s:$rate,10s:$rate,10s:$rate,10s:$rate,10s:$rate,10s:$rate" \
      --concurrency 2000 --warmup 0s --json "$dir/minute-$minute.json" >"$dir/minute-$minute.txt" 2>&1 ||
      die "$store: loadgen failed in minute $minute: $(tail -n 5 "$dir/minute-$minute.txt")"
  done
  local loads_after
  loads_after="$(metric "$METRICS_PORT" floodgate_config_load_success_total)"
  echo "$peak $rate $loads_before $loads_after $(grep -c reload "$dir/reloads.log" || true)" >"$dir/summary.txt"
  grep -iE 'panic|error' "$dir/floodgate.log" | head -n 20 >"$dir/log-errors.txt" || true
  cleanup_extra
  stop_floodgate
}

for store in $STORES; do
  soak_store "$store"
done

# The commit is start_workspace's, taken before the hours of running.
SOAK_WORK="$WORK" SOAK_STORES="$STORES" SOAK_MINUTES="$MINUTES" SOAK_WARMUP="$WARMUP_MINUTES" \
SOAK_PROVENANCE="$(report_provenance scripts/soak.sh)" SOAK_NPROC="$(nproc)" \
SOAK_KEYS="$KEYS" SOAK_CONCURRENCY="$CONCURRENCY" \
SOAK_PEAK_SECONDS="$PEAK_SECONDS" SOAK_REDIS_TIMEOUT_MS="$REDIS_TIMEOUT_MS" \
python3 scripts/lib/soak-report.py "$OUT"
