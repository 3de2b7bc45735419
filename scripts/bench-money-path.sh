#!/usr/bin/env bash
# Money-path benchmark over gRPC, on loopback only: floodgate on config/shop.yaml (one shared
# token bucket of C per second, classes critical 100 %, normal 80 %, low 50 %), offered
# 50 %, 100 % and 300 % of C by a mix of classes (examples/loadgen --mix, the classes taking
# turns by weight). Reports per class the offered rate, the admitted rate, the success rate
# and the p99 of the answered calls, in the steady state (after a settling stage in which the
# bucket's initial burst is spent).
#
#   scripts/bench-money-path.sh       # writes docs/benchmarks-money-path.md (about 2 minutes)
#
# Overrides (environment):
#   BENCH_CAPACITY     C: requests_per_unit (per second) of shop.yaml's pool     [1000]
#   BENCH_LOADS        offered load as multiples of C                           [0.5 1 3]
#   BENCH_MIXES        mixes, each CLASS:WEIGHT,…                                [critical:1,low:2 critical:2,normal:3,low:5]
#   BENCH_SETTLE       settling stage before each measurement, seconds          [3]
#   BENCH_SECONDS      measured stage, seconds                                  [10]
#   BENCH_CONNECTIONS  HTTP/2 connections                                       [4]
#   BENCH_OUT          the report                                               [docs/benchmarks-money-path.md]
set -euo pipefail
cd "$(dirname "$0")/.."

CAPACITY="${BENCH_CAPACITY:-1000}"
LOADS="${BENCH_LOADS:-0.5 1 3}"
MIXES="${BENCH_MIXES:-critical:1,low:2 critical:2,normal:3,low:5}"
SETTLE="${BENCH_SETTLE:-3}"
SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
CONNECTIONS="${BENCH_CONNECTIONS:-4}"
OUT="${BENCH_OUT:-docs/benchmarks-money-path.md}"
RULES=config/shop.yaml
# loadgen's cap on calls in flight: far above what these rates need, so none is client shed.
CLIENT_IN_FLIGHT=256

die() { echo "bench-money-path: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (free ports, the report)"
for value in "$CAPACITY" "$SETTLE" "$SECONDS_PER_RUN" "$CONNECTIONS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_CAPACITY, _SETTLE, _SECONDS and _CONNECTIONS are whole numbers (got '$value')"
done
for load in $LOADS; do
  [[ "$load" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "BENCH_LOADS holds multiples of C like 0.5 or 3 (got '$load')"
done
for mix in $MIXES; do
  [[ "$mix" =~ ^[a-z]+:[1-9][0-9]*(,[a-z]+:[1-9][0-9]*)*$ ]] ||
    die "BENCH_MIXES holds mixes like critical:1,low:2 (got '$mix')"
  for class in $(tr ',' ' ' <<<"$mix"); do
    grep -qE "classes: \{.*\b${class%%:*}: " "$RULES" || die "class '${class%%:*}' is not one of $RULES's classes"
  done
done

start_workspace bench-money-path
release_build bench-money-path --bin floodgate --example loadgen
FLOODGATE="$BIN/floodgate"
LOADGEN="$BIN/examples/loadgen"

# shop.yaml with C as its capacity (the bucket defaults to one second of it).
mkdir -p "$WORK/config"
grep -q '^      requests_per_unit: 200$' "$RULES" || die "$RULES no longer has 'requests_per_unit: 200': update this script"
sed "s/^      requests_per_unit: 200\$/      requests_per_unit: $CAPACITY/" "$RULES" >"$WORK/config/shop.yaml"
"$FLOODGATE" validate "$WORK/config/shop.yaml" >"$WORK/validate.log" 2>&1 || { cat "$WORK/validate.log" >&2; die "the rules do not load"; }

uptime >"$WORK/load-before.txt"
index=0
for mix in $MIXES; do
  index=$((index + 1))
  mix_args=()
  for class in $(tr ',' ' ' <<<"$mix"); do
    name="${class%%:*}"
    mix_args+=(--mix "$name:${class#*:}:pool=shop,priority=$name")
  done
  for load in $LOADS; do
    rate="$(python3 -c "print(round($load * $CAPACITY, 3))")"
    run="mix$index-x$load"
    echo "bench-money-path: mix $mix at ${load}× C = $rate req/s (settle ${SETTLE}s, measure ${SECONDS_PER_RUN}s)" >&2
    start_floodgate "$FLOODGATE" "$WORK/config" "$WORK/floodgate-$run.log"
    "$LOADGEN" --addr "http://127.0.0.1:$GRPC_PORT" --label "$run" --domain shop "${mix_args[@]}" \
      --connections "$CONNECTIONS" --concurrency "$CLIENT_IN_FLIGHT" --warmup 0s --timeout 2s \
      --start-rate "$rate" --stages "${SETTLE}s:$rate,${SECONDS_PER_RUN}s:$rate" \
      --json "$WORK/$run.json" >"$WORK/$run.txt"
    sed 's/^/    /' "$WORK/$run.txt" >&2
    stop_floodgate
  done
done
uptime >"$WORK/load-after.txt"

BENCH_PROVENANCE="$(report_provenance scripts/bench-money-path.sh)" BENCH_RUSTC="$(rustc --version 2>/dev/null || echo unknown)" \
python3 - "$WORK" "$OUT" "$CAPACITY" "$SETTLE" "$SECONDS_PER_RUN" "$CONNECTIONS" "$RULES" "$MIXES" "$LOADS" <<'EOF'
import json, os, sys, time
work, out, capacity, settle, seconds, connections, rules, mixes, loads = sys.argv[1:]
capacity = int(capacity)
provenance, rustc = os.environ["BENCH_PROVENANCE"], os.environ["BENCH_RUSTC"]
load_avg = lambda name: open(f"{work}/{name}").read().strip().split("load average:")[-1].strip()
n = lambda v: "–" if v is None else f"{v:,.0f}"
pct = lambda part, whole: "–" if not whole else f"{100.0 * part / whole:.1f} %"
lines = [
    "# Money-path benchmark: priority classes under overload",
    "",
    provenance,
    "",
    f"- {rustc}",
    f"- machine: {os.cpu_count()} CPUs, **shared**: loadgen, floodgate and whatever else runs on it (load average before: {load_avg('load-before.txt')}; after: {load_avg('load-after.txt')}). Read the ratios, not the absolute latencies.",
    f"- rules: `{rules}` with `requests_per_unit: {capacity:,}`: one token bucket of C = {capacity:,} per second (a bucket of {capacity:,}) shared by the classes critical 100 %, normal 80 %, low 50 %; memory store.",
    f"- traffic: gRPC `ShouldRateLimit` over {connections} HTTP/2 connections to 127.0.0.1, open loop, each request one descriptor `[pool=shop, priority=<class>]`, the classes taking turns by weight (`loadgen --mix`). Each run starts a fresh floodgate (a full bucket), settles for {settle} s (the bucket's initial burst is spent there) and is measured for the next {seconds} s.",
    "- per class: *offered* = requests sent per second; *admitted* = OK answers per second; *success* = OK / answered; *p99* of the answered calls (OK or OVER_LIMIT), request handed to the client → whole answer. Errors and requests the client could not send are counted apart.",
    "",
]
def figures(run):
    report = json.load(open(f"{work}/{run}.json"))
    stage = report["stages"][1]
    return stage["duration_s"], stage["classes"], stage["legit"]
for index, mix in enumerate(mixes.split(), start=1):
    classes = [part.split(":") for part in mix.split(",")]
    weight_sum = sum(int(w) for _, w in classes)
    described = ", ".join(f"{name} {int(w) / weight_sum:.0%}" for name, w in classes)
    lines += [
        f"## Mix {index}: {described}",
        "",
        "| load | class | offered req/s | admitted req/s | success | p99 µs | errors | client shed |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for load in loads.split():
        duration, stage_classes, legit = figures(f"mix{index}-x{load}")
        admitted_total = 0.0
        for figure in stage_classes:
            answered = figure["ok"] + figure["over_limit"]
            admitted = figure["ok"] / duration if duration else 0.0
            admitted_total += admitted
            lines.append(
                f"| {float(load):.0%} of C | {figure['name']} | {n(figure['sent'] / duration if duration else None)} "
                f"| {n(admitted)} | {pct(figure['ok'], answered)} | {n(figure['p99_us'])} | {figure['error']:,} | {figure['shed']:,} |"
            )
        lines.append(
            f"| {float(load):.0%} of C | **all** | {n(legit['sent'] / duration if duration else None)} | **{n(admitted_total)}** "
            f"({admitted_total / capacity:.0%} of C) | {pct(legit['ok'], legit['ok'] + legit['over_limit'])} | {n(legit['p99_us'])} | {legit['error']:,} | {legit['shed']:,} |"
        )
    lines.append("")
lines += [
    "Reading it:",
    "",
    "- up to C every class is admitted: at 100 % as much comes in as the bucket refills, so it stays "
    "about full; a little more and low is the first to see 429s.",
    "- beyond C the bucket is drained to the reserve levels: low is admitted only while at least half "
    "of the bucket is left, normal a fifth, so under sustained overload low gets nothing and normal "
    "only what critical leaves; critical keeps a success rate of 100 % as long as it alone asks for "
    "no more than C. The admitted total stays at C: what the upstream was sized for.",
    "- the first seconds of a run (not measured) show the bucket's initial burst: a full bucket lets "
    "low take its half at once, as after any quiet period.",
    "- p99 is the cost of the answer (OK or 429 alike) on a shared machine; shedding changes who gets "
    "which answer, not how fast it comes.",
    "",
]
with open(out, "w") as f:
    f.write("\n".join(lines))
print(f"bench-money-path: wrote {out}", file=sys.stderr)
EOF
