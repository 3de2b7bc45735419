#!/usr/bin/env bash
# Instructions per decision, counted by callgrind (valgrind): a server's own instructions for
# each answered ShouldRateLimit, the same count whatever else the host runs (timed figures on
# shared cores move by ±15 %; this does not). It ignores what an instruction costs (cache
# misses, waits in system calls), so it explains a timed figure, it does not replace one.
#
#   scripts/profile-callgrind.sh       # prints the report; BENCH_OUT=FILE writes it there too
#
# Each target runs under callgrind with one worker thread, loaded over gRPC by loadgen (release,
# not under valgrind) at a fixed rate, open loop, evenly spaced. Counters are dumped
# (`callgrind_control -d`, which also zeroes them) at four points, and each stretch reported:
#   1. start-up: from exec until the gRPC port answers (reading the configuration included);
#   2. warm-up: BENCH_WARMUP_DECISIONS decisions (first connections, series and tables made
#      at a key's first decision), reported but not used;
#   3. idle: BENCH_IDLE_SECONDS without traffic (timers and background tasks), per second;
#   4. measured: BENCH_DECISIONS decisions at BENCH_RATE per second.
# Per decision = measured instructions / decisions answered, and the same less the idle
# stretch's instructions per second over the measured stretch's length (what the decisions
# themselves cost). The measured decisions must all be answered (none shed, no error), or the
# script stops: lower BENCH_RATE if valgrind cannot keep up.
#
# Targets (BENCH_TARGETS, space-separated):
#   noop               `examples/noop_rls.rs --worker-threads 1`: the floor, a tonic server on
#                      floodgate's own tonic, hyper, runtime and allocator that answers OK and
#                      decides nothing (what bench-load.sh measures floodgate against)
#   noop-redis         the floor with one `EVALSHA` per call (`noop_rls --redis-url`: the same
#                      script on one multiplexed connection of the redis crate, answering OK):
#                      what any service that asks Redis once per decision costs
#   floodgate-memory   `floodgate serve --config BENCH_CONFIG_DIR --worker-threads 1`, memory
#                      store (the default)
#   floodgate-redis    the same on `--store redis` (a redis-server of the script's own, not
#                      under valgrind; the default `--redis-batch-max`; `--redis-timeout-ms
#                      1000`, as valgrind runs floodgate tens of times slower): floodgate's own
#                      instructions per decision in Redis mode, what its CPU per decision is
#                      made of (redis-server's work is not counted)
# With the floor, the report adds each floodgate's instructions per decision over the floor's:
# what the decision itself costs, the same count on any machine; with both stores, Redis over
# memory.
# A target is a name in start_target below: how to start it on a port; the rest is shared.
#
# Overrides (environment):
#   BENCH_TARGETS           targets, in order                       [noop floodgate-memory]
#   BENCH_CONFIG_DIR        floodgate's --config                    [config]
#   BENCH_DOMAIN            the rate-limit domain                   [edge]
#   BENCH_DESCRIPTOR        loadgen --descriptor template           [generic_key=api,client_id={key}]
#   BENCH_KEYS              distinct {key} values                   [10000]
#   BENCH_RATE              decisions per second                    [200]
#   BENCH_WARMUP_DECISIONS  decisions before counting               [1000]
#   BENCH_DECISIONS         decisions counted                       [6000]
#   BENCH_IDLE_SECONDS      the idle stretch, seconds               [10]
#   BENCH_OUT               also write the report here              [none]
#   BENCH_FLOODGATE_ARGS    more `floodgate serve` arguments for the floodgate targets, e.g.
#                           `--heavy-hitters` (what a feature costs per decision)  [none]
#   BENCH_KEEP_PROFILES     copy every callgrind dump into this directory, to read by
#                           function with `callgrind_annotate` (the measured stretch is
#                           cg-NAME.PID.4)                          [none]
#   BENCH_PREBUILT          take the binaries from this directory instead of building
#   BENCH_PROFILE           the cargo profile built (`dist`: the shipped build)  [release]
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS="${BENCH_TARGETS:-noop floodgate-memory}"
CONFIG_DIR="${BENCH_CONFIG_DIR:-config}"
DOMAIN="${BENCH_DOMAIN:-edge}"
DESCRIPTOR="${BENCH_DESCRIPTOR:-generic_key=api,client_id={key}}"
KEYS="${BENCH_KEYS:-10000}"
RATE="${BENCH_RATE:-200}"
WARMUP_DECISIONS="${BENCH_WARMUP_DECISIONS:-1000}"
DECISIONS="${BENCH_DECISIONS:-6000}"
IDLE_SECONDS="${BENCH_IDLE_SECONDS:-10}"
OUT="${BENCH_OUT:-}"
KEEP_PROFILES="${BENCH_KEEP_PROFILES:-}"
read -r -a FLOODGATE_ARGS <<<"${BENCH_FLOODGATE_ARGS:-}"

die() { echo "profile-callgrind: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (free ports, the report)"
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  die "valgrind (callgrind) is needed: scripts/install-peers.sh --bench"
for value in "$RATE" "$WARMUP_DECISIONS" "$DECISIONS" "$IDLE_SECONDS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] ||
    die "BENCH_RATE, BENCH_WARMUP_DECISIONS, BENCH_DECISIONS, BENCH_IDLE_SECONDS: whole numbers above 0 (got '$value')"
done
[ -e "$CONFIG_DIR" ] || die "no floodgate configuration at '$CONFIG_DIR' (set BENCH_CONFIG_DIR)"

start_workspace profile-callgrind
release_build profile-callgrind --bin floodgate --example noop_rls --example loadgen
LOADGEN="$BIN/examples/loadgen"

# ensure_redis: the script's redis-server on REDIS_PORT, started at its first use and kept (not
# under valgrind) until the script ends.
REDIS_PORT=""
ensure_redis() {
  if [ -z "$REDIS_PORT" ]; then
    command -v redis-server >/dev/null || die "redis-server is needed for floodgate-redis"
    read -r REDIS_PORT < <(free_ports 1)
    start_redis "$REDIS_PORT" "$WORK" "$WORK/redis.log"
    REDIS_PID_KEPT="$REDIS_PID"
    PIDS+=("$REDIS_PID_KEPT")
  fi
}

# start_target NAME PORT LOG: the target NAME under callgrind, serving gRPC on 127.0.0.1:PORT,
# its pid in TARGET_PID. A new target is one more case here (and its binary in release_build).
start_target() {
  local name="$1" port="$2" log="$3" http_port metrics_port
  local callgrind=(valgrind --tool=callgrind "--callgrind-out-file=$WORK/cg-$name.%p")
  case "$name" in
    noop)
      RUST_LOG=warn "${callgrind[@]}" "$BIN/examples/noop_rls" --addr "127.0.0.1:$port" \
        --worker-threads 1 >"$log" 2>&1 &
      ;;
    noop-redis)
      ensure_redis
      RUST_LOG=warn "${callgrind[@]}" "$BIN/examples/noop_rls" --addr "127.0.0.1:$port" \
        --worker-threads 1 --redis-url "redis://127.0.0.1:$REDIS_PORT" >"$log" 2>&1 &
      ;;
    floodgate-memory)
      read -r http_port metrics_port < <(free_ports 2)
      RUST_LOG=warn "${callgrind[@]}" "$BIN/floodgate" serve --config "$CONFIG_DIR" \
        --store memory --worker-threads 1 --grpc-addr "127.0.0.1:$port" \
        --http-addr "127.0.0.1:$http_port" --metrics-addr "127.0.0.1:$metrics_port" \
        ${FLOODGATE_ARGS[@]+"${FLOODGATE_ARGS[@]}"} >"$log" 2>&1 &
      ;;
    floodgate-redis)
      ensure_redis
      read -r http_port metrics_port < <(free_ports 2)
      RUST_LOG=warn "${callgrind[@]}" "$BIN/floodgate" serve --config "$CONFIG_DIR" \
        --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT" --redis-timeout-ms 1000 \
        --worker-threads 1 \
        --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$http_port" \
        --metrics-addr "127.0.0.1:$metrics_port" ${FLOODGATE_ARGS[@]+"${FLOODGATE_ARGS[@]}"} >"$log" 2>&1 &
      ;;
    *) die "unknown target '$name' (BENCH_TARGETS): noop, noop-redis, floodgate-memory, floodgate-redis" ;;
  esac
  TARGET_PID=$!
  PIDS=("$TARGET_PID" ${REDIS_PID_KEPT:+"$REDIS_PID_KEPT"})
}

# dump PID NAME STRETCH: callgrind's counters of PID written and zeroed; the dump's total
# instructions recorded as "STRETCH NAME IR" in $WORK/counts.
DUMPS=0
dump() {
  local pid="$1" name="$2" stretch="$3" file ir
  callgrind_control -d "$pid" >/dev/null || die "callgrind_control could not reach pid $pid"
  DUMPS=$((DUMPS + 1))
  file="$WORK/cg-$name.$pid.$DUMPS"
  for _ in $(seq 1 50); do
    [ -s "$file" ] && grep -q '^totals:' "$file" && break
    sleep 0.2
  done
  ir="$(awk '/^totals:/ {print $2; exit}' "$file")"
  [ -n "$ir" ] || die "no totals in callgrind's dump $file"
  echo "$stretch $name $ir" >>"$WORK/counts"
  echo "dump-$stretch $name $file" >>"$WORK/counts"
  if [ -n "$KEEP_PROFILES" ]; then
    mkdir -p "$KEEP_PROFILES" && cp "$file" "$KEEP_PROFILES/"
  fi
}

# load NAME DECISIONS JSON: DECISIONS requests at RATE, no warm-up of loadgen's own.
load() {
  local name="$1" decisions="$2" json="$3" millis
  millis=$((decisions * 1000 / RATE))
  "$LOADGEN" --addr "http://127.0.0.1:$GRPC_PORT" --domain "$DOMAIN" --descriptor "$DESCRIPTOR" \
    --keys "$KEYS" --rate "$RATE" --duration "${millis}ms" --warmup 0s --concurrency 512 \
    --connections 4 --json "$json" --label "$name" >"$json.txt" 2>&1 ||
    { tail -n 20 "$json.txt" >&2; die "loadgen failed against $name"; }
}

: >"$WORK/counts"
for name in $TARGETS; do
  echo "profile-callgrind: $name: start-up under callgrind" >&2
  read -r GRPC_PORT < <(free_ports 1)
  DUMPS=0
  start_target "$name" "$GRPC_PORT" "$WORK/$name.log"
  # valgrind starts slowly: 120 s at most.
  wait_port "$name under valgrind" "$TARGET_PID" "$GRPC_PORT" "$WORK/$name.log" 120
  dump "$TARGET_PID" "$name" start-up
  echo "profile-callgrind: $name: $WARMUP_DECISIONS decisions of warm-up" >&2
  load "$name" "$WARMUP_DECISIONS" "$WORK/$name-warmup.json"
  dump "$TARGET_PID" "$name" warm-up
  echo "profile-callgrind: $name: ${IDLE_SECONDS} s idle" >&2
  IDLE_START="$(date +%s.%N)"
  sleep "$IDLE_SECONDS"
  dump "$TARGET_PID" "$name" idle
  echo "idle-seconds $name $(python3 -c "import sys, time; print(time.time() - float(sys.argv[1]))" "$IDLE_START")" >>"$WORK/counts"
  echo "profile-callgrind: $name: $DECISIONS decisions at $RATE/s" >&2
  MEASURED_START="$(date +%s.%N)"
  load "$name" "$DECISIONS" "$WORK/$name-measured.json"
  dump "$TARGET_PID" "$name" measured
  echo "measured-seconds $name $(python3 -c "import sys, time; print(time.time() - float(sys.argv[1]))" "$MEASURED_START")" >>"$WORK/counts"
  kill "$TARGET_PID" 2>/dev/null || true
  wait "$TARGET_PID" 2>/dev/null || true
  PIDS=(${REDIS_PID_KEPT:+"$REDIS_PID_KEPT"})
done

python3 - "$WORK" "$TARGETS" "$RATE" "$DECISIONS" "$WARMUP_DECISIONS" "$CONFIG_DIR" \
  "$(report_provenance scripts/profile-callgrind.sh)" "$(valgrind --version)" \
  "$(rustc --version 2>/dev/null || echo rustc unknown)" >"$WORK/report.md" <<'PY'
import json, sys
work, targets, rate, decisions, warmup, config, provenance, valgrind, rustc = sys.argv[1:]
counts, seconds = {}, {}
dumps = {}
for line in open(f"{work}/counts"):
    first, name, value = line.split()
    if first in ("idle-seconds", "measured-seconds"):
        seconds[(name, first)] = float(value)
    elif first.startswith("dump-"):
        dumps[(first.removeprefix("dump-"), name)] = value
    else:
        counts[(first, name)] = int(value)

def self_cost(path, prefix):
    """Instructions spent in functions whose name starts with `prefix`, their own code only
    (a cost line after `calls=` is the callee's, inclusive, and is not counted)."""
    names, total, fn, after_call = {}, 0, None, False
    def named(token):
        ident, _, text = token.partition(" ")
        if text:
            names[ident] = text
        return names.get(ident, token)
    for line in open(path, errors="replace"):
        if line.startswith("fn="):
            fn = named(line[3:].rstrip("\n"))
        elif line.startswith("cfn="):
            # A name is given once, where it first appears: often as a callee.
            named(line[4:].rstrip("\n"))
        elif line.startswith("calls="):
            after_call = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if not after_call and fn and fn.startswith(prefix):
                total += int(line.split()[-1])
            after_call = False
    return total

def answered(name, stretch, strict=True):
    total = json.load(open(f"{work}/{name}-{stretch}.json"))["total"]["legit"]
    if strict and (total["error"] or total["shed"]):
        sys.exit(f"{name} {stretch}: {total['error']} errors and {total['shed']} shed of "
                 f"{total['sent']}: valgrind fell behind; lower BENCH_RATE")
    return total["ok"] + total["over_limit"]

print("# Instructions per decision (callgrind)")
print()
print(provenance)
print()
print(f"- {valgrind}, {rustc}; release build; each target on one worker thread under callgrind, "
      f"loaded over gRPC by loadgen (not under valgrind), open loop, evenly spaced, "
      f"{int(rate):,} decisions/s; configuration `{config}`")
print(f"- stretches: start-up (exec until the gRPC port answers), warm-up ({int(warmup):,} "
      f"decisions sent: first connections, first keys), idle (no traffic), measured ({int(decisions):,} decisions); "
      "callgrind's counters dumped and zeroed between them")
print("- *per decision*: the measured stretch's instructions over the decisions answered; "
      "*less idle*: the same after taking off what the idle stretch cost per second, times the "
      "measured stretch's length (timers and background tasks run either way)")
print("- *of which SHA-256 in software*: the measured stretch's instructions in the `sha2` crate's "
      "own code, per decision. valgrind does not pass the processor's SHA extensions (SHA-NI) on, "
      "so under callgrind `sha2` hashes in software; on a processor that has them (`sha_ni` in "
      "/proc/cpuinfo) it runs them instead, at a small fraction of this count. Redis mode hashes "
      "each counter's identity into its key (`src/store/redis/keys.rs`), and so does `noop-redis`, "
      "which sends the same call; the memory store does not")
print()
print("| target | start-up Ir | warm-up Ir per decision | idle Ir per second | measured Ir | "
      "decisions answered | Ir per decision | Ir per decision, less idle | of which SHA-256 in software |")
print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
per_decision, software_sha = {}, {}
for name in targets.split():
    done = answered(name, "measured")
    idle_rate = counts[("idle", name)] / seconds[(name, "idle-seconds")]
    measured = counts[("measured", name)]
    less_idle = measured - idle_rate * seconds[(name, "measured-seconds")]
    warm = counts[("warm-up", name)] / max(answered(name, "warmup", strict=False), 1)
    per_decision[name] = (measured / done, less_idle / done)
    software_sha[name] = self_cost(dumps[("measured", name)], "sha2::") / done
    print(f"| {name} | {counts[('start-up', name)]:,} | {warm:,.0f} | {idle_rate:,.0f} | {measured:,} | "
          f"{done:,} | {measured / done:,.0f} | {less_idle / done:,.0f} | {software_sha[name]:,.0f} |")
floor = per_decision.get("noop")
for name, (whole, less) in per_decision.items():
    if floor and name not in ("noop", "noop-redis"):
        print()
        print(f"{name} / noop, per decision less idle: {less / floor[1]:.2f}x "
              f"({less - floor[1]:,.0f} instructions more: the decision and what floodgate "
              f"adds around it; the gRPC and HTTP/2 work both share is the floor's {floor[1]:,.0f})")
if "floodgate-memory" in per_decision and "floodgate-redis" in per_decision:
    memory, redis = per_decision["floodgate-memory"][1], per_decision["floodgate-redis"][1]
    print()
    print(f"floodgate-redis / floodgate-memory, per decision less idle: {redis / memory:.2f}x "
          f"({redis - memory:,.0f} instructions more: the Redis call on floodgate's side, one "
          f"decision per call at this rate)")
    sha = software_sha["floodgate-redis"] - software_sha["floodgate-memory"]
    if sha > 0:
        print()
        print(f"the same without SHA-256 in software: {(redis - sha) / memory:.2f}x "
              f"({redis - memory - sha:,.0f} instructions more)")
if "noop-redis" in per_decision and floor:
    redis_floor = per_decision["noop-redis"][1]
    print()
    print(f"noop-redis - noop, per decision less idle: {redis_floor - floor[1]:,.0f} instructions "
          "(one EVALSHA on the redis crate's multiplexed connection, nothing decided)")
    if "floodgate-redis" in per_decision and "floodgate-memory" in per_decision:
        extra = per_decision["floodgate-redis"][1] - per_decision["floodgate-memory"][1]
        print()
        print(f"floodgate's Redis call over the floor's: {extra:,.0f} against "
              f"{redis_floor - floor[1]:,.0f} instructions ({extra / (redis_floor - floor[1]):.2f}x)")
PY
[ -z "$OUT" ] || { mkdir -p "$(dirname "$OUT")"; cp "$WORK/report.md" "$OUT"; }
cat "$WORK/report.md"
