#!/usr/bin/env bash
# Shedding benchmark, on loopback only: a backend of fixed capacity (a pool of workers that
# sleep a fixed service time, examples/shedbench.rs) behind a floodgate concurrency rule with
# two priority classes, offered 3× and 10× its capacity, under today's hard cut-off
# (max_in_flight alone: once at 4× the pool, room for a queue, once at the pool's size) and
# under probabilistic shedding (shed_above at the pool's size, the same 4× bound behind it; once
# with low's share at 50 %, once at 15 %, which the guide's rule says keeps critical whole at 3×).
# Each floodgate is also measured unloaded (a quarter of capacity), the base of the p99 ratios.
# The configurations take turns at each load, in one run.
#
# Then the same for floodgate's own admission (`--shed-above` against `--max-in-flight` alone):
# there the store has the fixed capacity. Redis sits behind scripts/lib/delay-proxy.py, which
# holds each reply for the service time; floodgate batches (`--redis-batch-max 2`) over
# `BENCH_WORKERS / 2` sockets, each with one call in flight, so the store decides at most
# sockets × 2 per service time, whatever the CPU does. A request is one ShouldRateLimit
# (`examples/shedbench.rs --mode decide`) under a limit it never reaches; the overload answer is
# OVER_LIMIT, and floodgate's metrics tell shed from refused at the bound.
#
#   scripts/bench-shedding.sh        # writes docs/benchmarks-shedding.md (about 3 minutes)
#
# Overrides (environment):
#   BENCH_WORKERS      backend workers                      [8]
#   BENCH_SERVICE_MS   each request's service time, ms      [20]
#   BENCH_SECONDS      length of each run, seconds          [8]
#   BENCH_OUT          the report                           [docs/benchmarks-shedding.md]
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS="${BENCH_WORKERS:-8}"
SERVICE_MS="${BENCH_SERVICE_MS:-20}"
SECONDS_PER_RUN="${BENCH_SECONDS:-8}"
OUT="${BENCH_OUT:-docs/benchmarks-shedding.md}"

die() { echo "bench-shedding: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (free ports, the report)"
[[ "$WORKERS" =~ ^[1-9][0-9]?$ ]] || die "BENCH_WORKERS must be 1 to 99"
[[ "$SERVICE_MS" =~ ^[1-9][0-9]{0,3}$ ]] || die "BENCH_SERVICE_MS must be 1 to 9999"
[[ "$SECONDS_PER_RUN" =~ ^[1-9][0-9]?$ ]] || die "BENCH_SECONDS must be 1 to 99"
[ "$WORKERS" -ge 2 ] || die "BENCH_WORKERS must be at least 2 (the store's sockets are half of it)"
command -v redis-server >/dev/null || die "redis-server is needed (scripts/install-peers.sh)"

start_workspace bench-shedding
release_build bench-shedding --bin floodgate --example shedbench
FLOODGATE="$BIN/floodgate"
SHEDBENCH="$BIN/examples/shedbench"

BOUND=$((WORKERS * 4))
CAPACITY=$((WORKERS * 1000 / SERVICE_MS))

# rules NAME MAX_IN_FLIGHT LOW_SHARE [SHED_ABOVE]: a configuration directory for one floodgate.
rules() {
  local dir="$WORK/rules-$1" shed=""
  [ -n "${4:-}" ] && shed="shed_above: $4, "
  mkdir -p "$dir"
  cat >"$dir/shedding.yaml" <<EOF
domain: shedding
descriptors:
  - key: pool
    value: api
    concurrency: {max_in_flight: $2, ${shed}lease: lease_id, release: {key: phase, value: done}, ttl: 60s}
    priority: {key: priority, classes: {critical: 100%, low: $3}, default: low}
EOF
  echo "$dir"
}

CONFIGS=(hard-queue hard-pool shed shed-low15)
declare -A CONFIG_DIR
CONFIG_DIR[hard-queue]="$(rules hard-queue "$BOUND" 50%)"
CONFIG_DIR[hard-pool]="$(rules hard-pool "$WORKERS" 50%)"
CONFIG_DIR[shed]="$(rules shed "$BOUND" 50% "$WORKERS")"
# The guide's rule for critical at 3×: low's share ≤ (capacity − critical's rate) / low's rate.
CONFIG_DIR[shed-low15]="$(rules shed-low15 "$BOUND" 15% "$WORKERS")"

# Floodgate's own admission: a rate rule the traffic never reaches, with the same classes, in
# front of a store of fixed capacity (Redis behind the delaying proxy).
SOCKETS=$((WORKERS / 2))
STORE_BATCH=2
STORE_IN_FLIGHT=$((SOCKETS * STORE_BATCH))
STORE_CAPACITY=$((STORE_IN_FLIGHT * 1000 / SERVICE_MS))
STORE_BOUND=$((STORE_IN_FLIGHT * 4))
SELF_RULES="$WORK/rules-self"
mkdir -p "$SELF_RULES"
cat >"$SELF_RULES/shedding.yaml" <<YAML
domain: shedding
descriptors:
  - key: pool
    value: api
    rate_limit: {unit: second, requests_per_unit: 1000000}
    priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}
YAML
SELF_CONFIGS=(self-hard-queue self-hard-pool self-shed)
declare -A SELF_FLAGS
SELF_FLAGS[self-hard-queue]="--max-in-flight $STORE_BOUND"
SELF_FLAGS[self-hard-pool]="--max-in-flight $STORE_IN_FLIGHT"
SELF_FLAGS[self-shed]="--max-in-flight $STORE_BOUND --shed-above $STORE_IN_FLIGHT"

read -r REDIS_PORT PROXY_PORT < <(free_ports 2)
mkdir -p "$WORK/redis"
start_redis "$REDIS_PORT" "$WORK/redis" "$WORK/redis.log"
STORE_PIDS=("$REDIS_PID")
python3 scripts/lib/delay-proxy.py "$PROXY_PORT" "$REDIS_PORT" "$SERVICE_MS" \
  >"$WORK/delay-proxy.log" 2>&1 &
STORE_PIDS+=("$!")
wait_port delay-proxy "$!" "$PROXY_PORT" "$WORK/delay-proxy.log"
stop_store() {
  local pid
  for pid in "${STORE_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${STORE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  stop_workspace
}
trap stop_store EXIT

# overload_rejections REASON: floodgate_overload_rejections_total{reason=REASON} now.
overload_rejections() {
  python3 - "$METRICS_PORT" "$1" <<'PY'
import re, sys, urllib.request
port, reason = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
series = re.compile(r'^floodgate_overload_rejections_total\{[^}]*reason="([^"]*)"[^}]*\} (\S+)$')
print(int(sum(float(m[2]) for m in map(series.match, text.splitlines()) if m and m[1] == reason)))
PY
}

# run CONFIG LOAD RATE: one open-loop run against a fresh floodgate (no leases left over).
run() {
  local config="$1" load="$2" rate="$3" json="$WORK/$1-$2.json"
  echo "bench-shedding: $config at $load ($rate req/s)" >&2
  if [[ "$config" == self-* ]]; then
    # shellcheck disable=SC2086 # the flags are words
    start_floodgate "$FLOODGATE" "$SELF_RULES" "$WORK/floodgate-$config-$load.log" \
      --store redis --redis-url "redis://127.0.0.1:$PROXY_PORT" --redis-pool-size "$SOCKETS" \
      --redis-batch-max "$STORE_BATCH" --redis-timeout-ms 2000 --overload-answer over_limit \
      ${SELF_FLAGS[$config]}
    "$SHEDBENCH" --mode decide --capacity-rps "$STORE_CAPACITY" \
      --addr "http://127.0.0.1:$GRPC_PORT" --label "$config-$load" --rate "$rate" \
      --duration-s "$SECONDS_PER_RUN" --json "$json.client" >/dev/null
    # The client gets one answer for both; floodgate's metrics tell them apart.
    python3 - "$json.client" "$json" "$(overload_rejections shed)" \
      "$(overload_rejections in_flight)" <<'PY'
import json, sys
client, out, shed, at_bound = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
report = json.load(open(client))
report["shed"], report["refused"] = shed, at_bound
json.dump(report, open(out, "w"))
PY
  else
    start_floodgate "$FLOODGATE" "${CONFIG_DIR[$config]}" "$WORK/floodgate-$config-$load.log"
    "$SHEDBENCH" --addr "http://127.0.0.1:$GRPC_PORT" --label "$config-$load" \
      --workers "$WORKERS" --service-ms "$SERVICE_MS" --rate "$rate" \
      --duration-s "$SECONDS_PER_RUN" --json "$json" >/dev/null
  fi
  stop_floodgate
}

for load in unloaded 3x 10x; do
  for config in "${CONFIGS[@]}" "${SELF_CONFIGS[@]}"; do
    capacity=$CAPACITY
    [[ "$config" == self-* ]] && capacity=$STORE_CAPACITY
    case "$load" in
      unloaded) rate=$((capacity / 4)) ;;
      3x) rate=$((capacity * 3)) ;;
      10x) rate=$((capacity * 10)) ;;
    esac
    run "$config" "$load" "$rate"
  done
done

BENCH_PROVENANCE="$(report_provenance scripts/bench-shedding.sh)" BENCH_RUSTC="$(rustc --version 2>/dev/null || echo unknown)" \
python3 - "$WORK" "$OUT" "$WORKERS" "$SERVICE_MS" "$SECONDS_PER_RUN" "$BOUND" "$CAPACITY" \
  "$SOCKETS" "$STORE_BATCH" "$STORE_IN_FLIGHT" "$STORE_BOUND" "$STORE_CAPACITY" <<'EOF'
import json, os, sys, time
(work, out, workers, service_ms, seconds, bound, capacity,
 sockets, store_batch, store_in_flight, store_bound, store_capacity) = sys.argv[1:]
load = lambda name: json.load(open(f"{work}/{name}.json"))
provenance, rustc = os.environ["BENCH_PROVENANCE"], os.environ["BENCH_RUSTC"]
n = lambda v: f"{v:,.0f}"
pct = lambda v: f"{100 * v:.1f} %"
labels = {
    "hard-queue": f"hard cut-off, `max_in_flight: {bound}`",
    "hard-pool": f"hard cut-off, `max_in_flight: {workers}`",
    "shed": f"shedding, `shed_above: {workers}`, `max_in_flight: {bound}`",
    "shed-low15": f"shedding as above, `low: 15%`",
    "self-hard-queue": f"hard cut-off, `--max-in-flight {store_bound}`",
    "self-hard-pool": f"hard cut-off, `--max-in-flight {store_in_flight}`",
    "self-shed": f"shedding, `--shed-above {store_in_flight}`, `--max-in-flight {store_bound}`",
}
header = [
    "| floodgate | load | offered req/s | answered p99 ms | ratio to unloaded | served p99 ms | ratio to unloaded | goodput req/s | goodput / capacity | critical success | low success | shed | refused at the bound | errors |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
]

def rows(configs, capacity):
    lines = []
    for load_name in ("unloaded", "3x", "10x"):
        for config in configs:
            report = load(f"{config}-{load_name}")
            base = load(f"{config}-unloaded")
            ratio = lambda key: report[key] / max(base[key], 1)
            lines.append(
                f"| {labels[config]} | {load_name} | {n(report['offered_rps'])} "
                f"| {report['answered_p99_us'] / 1000:.1f} | {ratio('answered_p99_us'):.2f}× "
                f"| {report['served_p99_us'] / 1000:.1f} | {ratio('served_p99_us'):.2f}× "
                f"| {n(report['goodput_rps'])} | {report['goodput_rps'] / float(capacity):.2f} "
                f"| {pct(report['critical']['success_rate'])} | {pct(report['low']['success_rate'])} "
                f"| {report['shed']:,} | {report['refused']:,} | {report['errors']:,} |"
            )
    return lines

lines = [
    "# Shedding benchmark: a backend or a store of fixed capacity offered 3× and 10× of it",
    "",
    provenance,
    "",
    f"- {rustc}",
    f"- machine: {os.cpu_count()} CPUs, shared by floodgate (the memory store for concurrency rules, Redis for its own admission), redis-server and the load (`examples/shedbench.rs`).",
    f"- backend: {workers} workers, each request served by sleeping {service_ms} ms: capacity **{n(int(capacity))} req/s**, whatever the CPU does.",
    f"- traffic: open loop, {seconds} s per run; one request in 5 `critical`, the rest `low` (classes `critical: 100%`, `low: 50%` unless the row says). A request asks floodgate for a lease (gRPC ShouldRateLimit, as Envoy's first call), waits for a worker if admitted, is served, and releases its lease (the stream-end call).",
    "- latency: from when the request was due to its refusal or the end of its service (its queue wait included); *answered* = served or refused. *Good* = served within 100 ms (5× the service time); goodput = good per second.",
    "- ratios: each p99 over the same floodgate's p99 unloaded (a quarter of capacity, nothing refused), measured in this run.",
    "",
    "## Concurrency rules",
    "",
    *header,
    *rows(("hard-queue", "hard-pool", "shed", "shed-low15"), capacity),
]
cap = float(capacity)
offered_3x = load("shed-3x")["offered_rps"]
critical_3x, low_3x = offered_3x / 5, offered_3x * 4 / 5
soft_critical, soft_low = int(workers), max(1, int(workers) // 2)
depth_3x = (critical_3x * soft_critical + low_3x * soft_low) / cap
lines += [
    "",
    "Reading it:",
    "",
    "- **The hard cut-off with room for a queue** keeps the workers busy, but the depth sits at the bound and every served request waits behind it: the highest p99.",
    "- **The hard cut-off at the pool's size** queues nothing (the lowest p99), but a lease is held a little longer than its service (the calls around it), and `low`'s reserve keeps it out while `critical` holds a few slots: workers stand idle, and goodput falls short of capacity.",
    f"- **Shedding** keeps the goodput of the queue with a lower p99: past `shed_above` a class survives `soft_c / depth` (`soft_c` = shed_above × its share), so the depth levels off where the admitted rate meets the capacity, `depth ≈ Σ offered_c × soft_c / capacity` while below the bound (here {depth_3x:.1f} at 3×, and the bound by 10×, where the hard bound is the last line as designed).",
    f"- **Critical traffic**: the hard cut-offs reserve slots for it, so at 3× they admit all of it. Shedding admits each class in proportion to its threshold × its offered rate, and past `soft_critical` = {soft_critical} critical is shed too: `critical` is never shed only while `Σ offered_c × soft_c ≤ capacity × soft_critical`. With `low` at 4× critical's rate as here, that takes a `low` share ≤ (capacity − critical's rate) / low's rate = {max(0.0, (cap - critical_3x) / low_3x) * 100:.0f} % at 3×: the `low: 15%` rows check that rule (predicted depth {(critical_3x * soft_critical + low_3x * 1) / cap:.1f} at 3×, below critical's {soft_critical}): critical keeps all its traffic, but a class's share sets its reserved slots as well as its threshold, so `low` is shed past 1 in flight even unloaded and kept out at the bound while critical holds a few slots, and goodput falls to the hard cut-off's at the pool's size. Today, choose between them: reserved slots (no `shed_above`) where critical's success matters most, shedding where goodput and latency do; see [concurrency.md](concurrency.md#shedding-before-the-bound).",
    "",
    "## floodgate's own admission (`--shed-above`)",
    "",
    f"- store: Redis behind `scripts/lib/delay-proxy.py`, which holds each reply {service_ms} ms; floodgate `--store redis --redis-pool-size {sockets} --redis-batch-max {store_batch} --redis-timeout-ms 2000 --overload-answer over_limit`: each socket has one script call in flight, of at most {store_batch} decisions, so the store decides at most {store_in_flight} per {service_ms} ms, capacity **{n(int(store_capacity))} decisions/s**, whatever the CPU does.",
    "- traffic: the same open loop and classes; a request is one ShouldRateLimit (`shedbench --mode decide`) on a rule whose limit it never reaches (`requests_per_unit: 1000000` per second, classes `critical: 100%`, `low: 50%`). *Served* = decided OK; a shed call and one refused at the bound both get the overload answer (OVER_LIMIT), told apart by `floodgate_overload_rejections_total{reason}` (`shed`, `in_flight`), read from floodgate after each run. *Good* = decided within 100 ms.",
    f"- the depth is the calls in floodgate's limiter: those in a script call ({store_in_flight} at capacity) and those waiting for one.",
    "",
    *header,
    *rows(("self-hard-queue", "self-hard-pool", "self-shed"), store_capacity),
]
self_row = lambda config, load_name: load(f"{config}-{load_name}")
p99_ratio = lambda config, load_name: (self_row(config, load_name)["answered_p99_us"]
                                       / max(self_row(config, "unloaded")["answered_p99_us"], 1))
goodput = lambda config, load_name: self_row(config, load_name)["goodput_rps"] / float(store_capacity)
critical = lambda config, load_name: pct(self_row(config, load_name)["critical"]["success_rate"])
lines += [
    "",
    "Reading it:",
    "",
    f"- **The hard cut-off with room for a queue** keeps the store busy (goodput {goodput('self-hard-queue', '3x'):.2f} of capacity at 3×), and every decided call waits behind the queue (p99 {p99_ratio('self-hard-queue', '3x'):.2f}× unloaded); the bound's refusals fall on both classes alike (critical {critical('self-hard-queue', '3x')}).",
    f"- **The hard cut-off at the store's own in-flight** ({store_in_flight}) queues nothing, but while it holds the rest out a socket's next call starts with whoever came meanwhile, often alone: batches run half-full and goodput falls to {goodput('self-hard-pool', '3x'):.2f}.",
    f"- **Shedding** keeps the queue's goodput ({goodput('self-shed', '3x'):.2f} at 3×) with a lower p99 ({p99_ratio('self-shed', '3x'):.2f}×) and sheds `low` first: critical's success {critical('self-shed', '3x')} against {critical('self-hard-queue', '3x')} under the queue at 3×, {critical('self-shed', '10x')} against {critical('self-hard-queue', '10x')} at 10×, where the depth reaches the bound and the hard bound is the last line, as designed. As with concurrency rules, critical is shed too once the depth passes its own threshold ({store_in_flight}), and the same rule for shares holds.",
    "",
]
with open(out, "w") as f:
    f.write("\n".join(lines))
print(f"bench-shedding: wrote {out}", file=sys.stderr)
EOF
