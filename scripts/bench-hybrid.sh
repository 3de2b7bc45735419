#!/usr/bin/env bash
# Hybrid store benchmark (`--store hybrid`): on one machine, in one run,
#   1. throughput on one hot key: floodgate --store hybrid against floodgate --store memory,
#      runs in ABBA order (memory, hybrid, hybrid, memory), the limit never reached; Redis
#      script calls per decision over the hybrid runs (INFO commandstats);
#   2. over-admission: three hybrid instances on one Redis, each driven at its peak on one key
#      whose limit LIMIT the three exceed within the run; admitted (the instances' metrics) and
#      counted (Redis) against LIMIT and the stated bound LIMIT × (1 + share).
#   With the Limitador comparison (BENCH_LIMITADOR=1, the default): examples/limitador-rls, an
#   Envoy RLS on the limitador crate's cached Redis storage (`redis_cached`), built here only
#   (its own workspace and target directory, target/limitador), flushing every BENCH_SYNC_MS
#   like floodgate's sync; it runs in part 1 between the two hybrid runs (memory, hybrid,
#   limitador, limitador, hybrid, memory) and in part 2 as three instances of its own on the
#   same limit, and is reported as floodgate hybrid / Limitador throughput, Redis commands per
#   decision and over-admission, measured the same way.
#
#   scripts/bench-hybrid.sh        # writes docs/benchmarks-hybrid.md (two to three minutes,
#                                  # plus Limitador's first build: several minutes)
#
# Overrides (environment):
#   BENCH_SECONDS         length of each loadgen run, seconds            [10]
#   BENCH_CLIENTS         loadgen calls in flight                        [50]
#   BENCH_WORKER_THREADS  floodgate --worker-threads, both stores        [1]
#   BENCH_SYNC_MS         --hybrid-sync-ms                               [100]
#   BENCH_SHARE           --hybrid-local-share                           [0.01]
#   BENCH_LIMIT           the over-admission run's limit per hour [auto: a third of what one
#                         instance sent in a run of part 1; three at once, sharing the cores,
#                         send about twice that, so the limit is reached about halfway]
#   BENCH_PROFILE         release, or debug (quicker to build; the calls per decision and
#                         the over-admission do not depend on it, the throughput does) [release]
#   BENCH_OUT             the report                                     [docs/benchmarks-hybrid.md]
#   BENCH_LIMITADOR       1: compare with Limitador's redis_cached; 0: floodgate only    [1]
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
CLIENTS="${BENCH_CLIENTS:-50}"
WORKER_THREADS="${BENCH_WORKER_THREADS:-1}"
SYNC_MS="${BENCH_SYNC_MS:-100}"
SHARE="${BENCH_SHARE:-0.01}"
LIMIT="${BENCH_LIMIT:-auto}"
OUT="${BENCH_OUT:-docs/benchmarks-hybrid.md}"
PROFILE="${BENCH_PROFILE:-release}"
LIMITADOR="${BENCH_LIMITADOR:-1}"

die() { echo "bench-hybrid: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
for tool in python3 redis-server redis-cli curl; do
  command -v "$tool" >/dev/null || die "$tool is needed: scripts/install-peers.sh --bench"
done
[ "$LIMITADOR" = 0 ] || [ "$LIMITADOR" = 1 ] || die "BENCH_LIMITADOR is 0 or 1"
[ "$LIMIT" = auto ] || [[ "$LIMIT" =~ ^[1-9][0-9]*$ ]] || die "BENCH_LIMIT is auto or a whole number"
for value in "$SECONDS_PER_RUN" "$CLIENTS" "$WORKER_THREADS" "$SYNC_MS"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_* values must be whole numbers (got '$value')"
done

start_workspace bench-hybrid
case "$PROFILE" in
  release) release_build bench-hybrid --bin floodgate --example loadgen ;;
  debug)
    cargo build --bin floodgate --example loadgen >"$WORK/build.log" 2>&1 ||
      { tail -n 40 "$WORK/build.log" >&2; die "the build failed"; }
    BIN="$(cargo metadata --format-version 1 --no-deps |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug"
    ;;
  *) die "BENCH_PROFILE is release or debug (got '$PROFILE')" ;;
esac

# Limitador's RLS: its own workspace and target directory, so nothing else builds it.
LIMITADOR_BIN=""
LIMITADOR_NOTE=""
LIMITADOR_PATCHED=0
limitador_build() { # CARGO-ARGS…
  CARGO_TARGET_DIR="$PWD/target/limitador" cargo build --release \
    --manifest-path examples/limitador-rls/Cargo.toml "$@" >>"$WORK/limitador-build.log" 2>&1
}
# limitador 0.11 to 0.14 do not build without `disk_storage`: storage/keys.rs calls
# `bin::key_for_counter_v2` (and that `Counter::variables_for_key`) for counters with an id,
# whatever the storage, but declares both under #[cfg(feature = "disk_storage")]. Turning that
# feature on builds RocksDB (C++); instead the published crate is built with those two
# attributes removed, in a copy under target/limitador, and nothing else changed.
ungated_limitador() { # SOURCE COPY (kept for the next run, so cargo need not rebuild it)
  [ -f "$2/.ungated" ] && return 0
  rm -rf "$2"
  cp -rp "$1" "$2"
  python3 - "$2" <<'PY'
import sys
root = sys.argv[1]
gate = '#[cfg(feature = "disk_storage")]'
for path, item in [("src/storage/keys.rs", "pub mod bin {"),
                   ("src/counter.rs", "pub(crate) fn variables_for_key(")]:
    lines = open(f"{root}/{path}").read().split("\n")
    at = next((n for n, line in enumerate(lines) if line.strip().startswith(item)), None)
    if at is None or at == 0 or lines[at - 1].strip() != gate:
        sys.exit(f"limitador's {path}: `{item}` is not under the disk_storage gate any more")
    del lines[at - 1]
    open(f"{root}/{path}", "w").write("\n".join(lines))
open(f"{root}/.ungated", "w").write("the two disk_storage gates removed by scripts/bench-hybrid.sh\n")
PY
}
if [ "$LIMITADOR" = 1 ]; then
  echo "bench-hybrid: building examples/limitador-rls (release, target/limitador)" >&2
  if limitador_build; then
    LIMITADOR_BIN="$PWD/target/limitador/release/limitador-rls"
  elif grep -q 'unresolved module or unlinked crate `bin`' "$WORK/limitador-build.log"; then
    source_dir="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/limitador-0.14.0 | head -n 1)"
    patched="$PWD/target/limitador/limitador-0.14.0-ungated"
    echo "bench-hybrid: limitador 0.14.0 needs disk_storage to build; building it with the gate removed" >&2
    if ungated_limitador "$source_dir" "$patched" &&
      limitador_build --config "patch.crates-io.limitador.path=\"$patched\""; then
      LIMITADOR_BIN="$PWD/target/limitador/release/limitador-rls"
      LIMITADOR_PATCHED=1
    fi
  fi
  if [ -z "$LIMITADOR_BIN" ]; then
    tail -n 20 "$WORK/limitador-build.log" >&2
    LIMITADOR_NOTE="examples/limitador-rls did not build: $(grep -m1 '^error' "$WORK/limitador-build.log" || echo 'see the build log')"
    echo "bench-hybrid: $LIMITADOR_NOTE; going on without it" >&2
  fi
fi

read -r REDIS_PORT M_GRPC M_HTTP M_METRICS H_GRPC H_HTTP H_METRICS L_GRPC < <(free_ports 8)
start_redis "$REDIS_PORT" "$WORK" "$WORK/redis.log"
PIDS+=("$REDIS_PID")

write_counter_config "$WORK/config" 1000000000 hour

serve() { # NAME GRPC HTTP METRICS FLAGS…  (the rules: $WORK/${CONFIG:-config})
  local name="$1" grpc="$2" http="$3" metrics="$4"
  shift 4
  RUST_LOG=warn "$BIN/floodgate" serve --config "$WORK/${CONFIG:-config}" --worker-threads "$WORKER_THREADS" \
    --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
    --metrics-addr "127.0.0.1:$metrics" "$@" >"$WORK/$name.log" 2>&1 &
  SERVED_PID=$!
  PIDS+=("$SERVED_PID")
  wait_port "$name" "$SERVED_PID" "$grpc" "$WORK/$name.log"
}
HYBRID_FLAGS=(--store hybrid --redis-url "redis://127.0.0.1:$REDIS_PORT/0"
  --redis-timeout-ms 100 --hybrid-sync-ms "$SYNC_MS" --hybrid-local-share "$SHARE"
  --redis-failure-policy local)
serve memory "$M_GRPC" "$M_HTTP" "$M_METRICS" --store memory
serve hybrid "$H_GRPC" "$H_HTTP" "$H_METRICS" "${HYBRID_FLAGS[@]}"
serve_limitador() { # NAME GRPC DB GENERIC-KEY LIMIT: the rule of the floodgate runs, in Limitador
  local name="$1" grpc="$2" db="$3" value="$4" limit="$5"
  RUST_LOG=warn "$LIMITADOR_BIN" --addr "127.0.0.1:$grpc" \
    --redis-url "redis://127.0.0.1:$REDIS_PORT/$db" --domain edge --generic-key "$value" \
    --limit "$limit" --seconds 3600 --flush-ms "$SYNC_MS" --worker-threads "$WORKER_THREADS" \
    >"$WORK/$name.log" 2>&1 &
  SERVED_PID=$!
  PIDS+=("$SERVED_PID")
  wait_port "$name" "$SERVED_PID" "$grpc" "$WORK/$name.log"
}
if [ -n "$LIMITADOR_BIN" ]; then
  serve_limitador limitador "$L_GRPC" 1 api 1000000000
  LIMITADOR_PID="$SERVED_PID"
fi

drive() { # PORT NAME VALUE ARGS…: loadgen on one key (client_id=VALUE under generic_key=api
  local port="$1" name="$2" value="$3"   # unless ARGS say otherwise)
  shift 3
  "$BIN/examples/loadgen" --addr "http://127.0.0.1:$port" --label "$name" --domain edge \
    --descriptor "generic_key=api,client_id=$value{key}" --keys 1 --concurrency "$CLIENTS" --max-rate \
    --duration "${SECONDS_PER_RUN}s" --json "$WORK/$name.json" "$@" >"$WORK/$name.txt"
  sed 's/^/    /' "$WORK/$name.txt" >&2
}
rps() { python3 -c "import json; print(json.load(open('$WORK/$1.json'))['total']['legit']['achieved_rps'])"; }
answered() { # LOADGEN-RUN…: the OK answers (ok) or all answers (ok over_limit) over the runs
  local field="$1"
  shift
  python3 - "$WORK" "$field" "$@" <<'PY'
import json, sys
work, field, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
fields = ["ok", "over_limit"] if field == "answers" else [field]
print(sum(json.load(open(f"{work}/{run}.json"))["total"]["legit"][f] for run in runs for f in fields))
PY
}
redis_commands() { # every command Redis ran but INFO (what the measurement itself sends)
  redis-cli -p "$REDIS_PORT" INFO commandstats |
    awk -F'[=,:]' '/^cmdstat_/ && !/^cmdstat_info:/ {sum += $3} END {printf "%d", sum}'
}
script_calls() {
  redis-cli -p "$REDIS_PORT" INFO commandstats |
    awk -F'[=,:]' '/^cmdstat_evalsha:/ {printf "%d", $3}'
}
admitted() { # METRICS-PORT
  curl -fsS "http://127.0.0.1:$1/metrics" |
    awk '/^floodgate_requests_allowed_total[{ ]/ {sum += $NF} END {printf "%d", sum}'
}
decided() { # METRICS-PORT: admitted and rejected
  curl -fsS "http://127.0.0.1:$1/metrics" |
    awk '/^floodgate_requests_(allowed|rejected)_total[{ ]/ {sum += $NF} END {printf "%d", sum}'
}

echo "bench-hybrid: 1. one hot key: memory, hybrid${LIMITADOR_BIN:+, limitador, limitador}, hybrid, memory" >&2
drive "$M_GRPC" memory-1 hot
CALLS0="$(script_calls)"
COMMANDS0="$(redis_commands)"
DECIDED0="$(admitted "$H_METRICS")"
drive "$H_GRPC" hybrid-1 hot
CALLS_A="$(script_calls)"
COMMANDS_A="$(redis_commands)"
L_COMMANDS=0
if [ -n "$LIMITADOR_BIN" ]; then
  drive "$L_GRPC" limitador-1 hot
  drive "$L_GRPC" limitador-2 hot
  # Its last flush lands within one interval of the last decision.
  sleep 1
  L_COMMANDS=$(( $(redis_commands) - COMMANDS_A ))
  kill "$LIMITADOR_PID" 2>/dev/null || true
fi
CALLS_B="$(script_calls)"
COMMANDS_B="$(redis_commands)"
drive "$H_GRPC" hybrid-2 hot
CALLS1=$(( $(script_calls) - CALLS_B + CALLS_A ))
COMMANDS1=$(( $(redis_commands) - COMMANDS_B + COMMANDS_A ))
DECIDED1="$(admitted "$H_METRICS")"
drive "$M_GRPC" memory-2 hot

# 2. Over-admission: three fresh hybrid instances on a capped key, away from an hour's edge.
kill "$SERVED_PID" 2>/dev/null || true
until_hour=$((3600 - $(date +%s) % 3600))
# floodgate's windows are the clock's hours; Limitador's runs after it (its window starts at
# its first hit).
needed=$((SECONDS_PER_RUN + 30))
[ -z "$LIMITADOR_BIN" ] || needed=$((2 * SECONDS_PER_RUN + 40))
if [ "$until_hour" -lt "$needed" ]; then
  echo "bench-hybrid: waiting ${until_hour}s for the next hour's window" >&2
  sleep $((until_hour + 2))
fi
if [ "$LIMIT" = auto ]; then
  LIMIT="$(python3 -c "
import json
rates = [json.load(open(f'$WORK/hybrid-{n}.json'))['total']['legit']['achieved_rps'] for n in (1, 2)]
print(max(1000, int(sum(rates) / 2 * $SECONDS_PER_RUN / 3)))")"
fi
mkdir -p "$WORK/over-config"
cat >"$WORK/over-config/edge.yaml" <<EOF
domain: edge
descriptors:
  - key: generic_key
    value: capped
    descriptors:
      - key: client_id
        rate_limit: {unit: hour, requests_per_unit: $LIMIT, algorithm: fixed_window}
EOF
read -r A_GRPC A_HTTP A_METRICS B_GRPC B_HTTP B_METRICS C_GRPC C_HTTP C_METRICS < <(free_ports 9)
OVER_FLAGS=("${HYBRID_FLAGS[@]}" --redis-prefix over:)
CONFIG=over-config serve over-a "$A_GRPC" "$A_HTTP" "$A_METRICS" "${OVER_FLAGS[@]}"
CONFIG=over-config serve over-b "$B_GRPC" "$B_HTTP" "$B_METRICS" "${OVER_FLAGS[@]}"
CONFIG=over-config serve over-c "$C_GRPC" "$C_HTTP" "$C_METRICS" "${OVER_FLAGS[@]}"
KEY="k$(date +%s)"
# NAME PORT-A PORT-B PORT-C: one loadgen per instance at once, on the capped key, without
# warm-up: Limitador's admissions are the loadgens' OK answers, so every request must count.
drive_three() {
  local name="$1" side port pid pids=()
  shift
  for side in a b c; do
    port="$1"
    shift
    "$BIN/examples/loadgen" --addr "http://127.0.0.1:$port" --label "$name-$side" \
      --domain edge --descriptor "generic_key=capped,client_id=$KEY{key}" --keys 1 \
      --concurrency "$CLIENTS" --max-rate --duration "${SECONDS_PER_RUN}s" --warmup 0s \
      --json "$WORK/$name-$side.json" >"$WORK/$name-$side.txt" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}
echo "bench-hybrid: 2. three instances on one key limited to $LIMIT per hour" >&2
CALLS2="$(script_calls)"
drive_three over "$A_GRPC" "$B_GRPC" "$C_GRPC"
sleep 1 # the last syncs
CALLS3="$(script_calls)"
OVER_ADMITTED=$(( $(admitted "$A_METRICS") + $(admitted "$B_METRICS") + $(admitted "$C_METRICS") ))
OVER_DECIDED=$(( $(decided "$A_METRICS") + $(decided "$B_METRICS") + $(decided "$C_METRICS") ))
IN_REDIS="$(for key in $(redis-cli -p "$REDIS_PORT" --scan --pattern 'over:*'); do
  redis-cli -p "$REDIS_PORT" GET "$key"; done | awk '/^F / {sum += $NF} END {printf "%d", sum}')"

# The same for Limitador: three instances of its own (Redis database 2), the same limit, key
# and load, once floodgate's are stopped.
L_OVER_ADMITTED=0 L_OVER_DECIDED=0 L_IN_REDIS=0 L_OVER_COMMANDS=0
if [ -n "$LIMITADOR_BIN" ]; then
  for pid in "${PIDS[@]}"; do
    [ "$pid" = "$REDIS_PID" ] || kill "$pid" 2>/dev/null || true
  done
  read -r LA_GRPC LB_GRPC LC_GRPC < <(free_ports 3)
  serve_limitador limitador-a "$LA_GRPC" 2 capped "$LIMIT"
  serve_limitador limitador-b "$LB_GRPC" 2 capped "$LIMIT"
  serve_limitador limitador-c "$LC_GRPC" 2 capped "$LIMIT"
  echo "bench-hybrid: 2. three Limitador instances on one key limited to $LIMIT per hour" >&2
  L_COMMANDS2="$(redis_commands)"
  drive_three limitador-over "$LA_GRPC" "$LB_GRPC" "$LC_GRPC"
  sleep 1 # the last flushes
  L_OVER_COMMANDS=$(( $(redis_commands) - L_COMMANDS2 ))
  L_OVER_ADMITTED="$(answered ok limitador-over-a limitador-over-b limitador-over-c)"
  L_OVER_DECIDED="$(answered answers limitador-over-a limitador-over-b limitador-over-c)"
  # Its counters are strings holding the count; the sets beside them list a limit's counters.
  L_IN_REDIS="$(redis-cli -p "$REDIS_PORT" -n 2 --scan --pattern 'namespace:*' |
    while IFS= read -r key; do
      if [ "$(redis-cli -p "$REDIS_PORT" -n 2 TYPE "$key")" = string ]; then
        redis-cli -p "$REDIS_PORT" -n 2 GET "$key"
      fi
    done | awk '/^[0-9]+$/ {sum += $1} END {printf "%d", sum}')"
fi
L_DECIDED=0
[ -z "$LIMITADOR_BIN" ] || L_DECIDED="$(answered answers limitador-1 limitador-2)"
LOAD_AVERAGE="$(uptime | sed 's/.*load average: //')"

python3 - "$WORK" "$OUT" "$(report_provenance scripts/bench-hybrid.sh)" "$PROFILE" "$SECONDS_PER_RUN" "$CLIENTS" "$WORKER_THREADS" "$SYNC_MS" \
  "$SHARE" "$LIMIT" "$((CALLS1 - CALLS0))" "$((DECIDED1 - DECIDED0))" "$OVER_ADMITTED" \
  "$IN_REDIS" "$((CALLS3 - CALLS2))" "$OVER_DECIDED" "$COMMANDS1" "${LIMITADOR_BIN:+1}" \
  "$L_COMMANDS" "$L_DECIDED" "$L_OVER_ADMITTED" "$L_OVER_DECIDED" "$L_IN_REDIS" \
  "$L_OVER_COMMANDS" "$LIMITADOR_NOTE" "$LOAD_AVERAGE" "$LIMITADOR_PATCHED" <<'PY'
import json, sys
(work, out, provenance, profile, seconds, clients, threads, sync_ms, share, limit, calls, decided,
 over_admitted, in_redis, over_calls, over_decided, commands, limitador, l_commands, l_decided,
 l_over_admitted, l_over_decided, l_in_redis, l_over_commands, limitador_note,
 load_average, limitador_patched) = sys.argv[1:]
rate = lambda name: json.load(open(f"{work}/{name}.json"))["total"]["legit"]["achieved_rps"]
memory = (rate("memory-1") + rate("memory-2")) / 2
hybrid = (rate("hybrid-1") + rate("hybrid-2")) / 2
limit, share = int(limit), float(share)
bound = limit * (1 + share)
admitted = int(over_admitted)
calls, decided = int(calls), int(decided)
over_calls, over_decided = int(over_calls), int(over_decided)
lines = [
    "# Benchmarks: the hybrid store",
    "",
    provenance,
    "",
    "Loopback only. Every figure is a ratio to a baseline of the same run.",
    "",
    f"- floodgate ({profile} build) `--worker-threads {threads}`, both stores; hybrid `--hybrid-sync-ms {sync_ms}"
    f" --hybrid-local-share {share}`; loadgen over gRPC, {clients} calls in flight, one key,"
    f" {seconds} s per run.",
    "",
    "## One hot key: hybrid against the memory store (ABBA)",
    "",
    "| run | decisions/s |",
    "|---|---|",
    f"| memory, first | {rate('memory-1'):,.0f} |",
    f"| hybrid, first | {rate('hybrid-1'):,.0f} |",
    f"| hybrid, second | {rate('hybrid-2'):,.0f} |",
    f"| memory, second | {rate('memory-2'):,.0f} |",
    "",
    f"- **Throughput: {hybrid / memory:.2f}×** the memory store's (means of the two runs each:"
    f" {hybrid:,.0f} against {memory:,.0f} decisions/s).",
    f"- **Redis script calls per decision: {calls / max(decided, 1):.5f}** ({calls:,} calls for"
    f" {decided:,} hybrid decisions over both runs; every Redis command:"
    f" {int(commands) / max(decided, 1):.5f}).",
    "",
    "## Over-admission: three instances at their peak on one key",
    "",
    f"- Limit {limit:,} per hour, bound {bound:,.0f} (limit × (1 + share)); {over_decided:,}"
    f" requests decided, sent by three loadgens, one per instance, at once.",
    f"- **Admitted {admitted:,}: {admitted / limit:.4f}× the limit (over-admission"
    f" {(admitted - limit) / limit * 100:+.2f} %)**; Redis counts {int(in_redis):,}.",
    f"- Script calls per decision in this run: {over_calls / max(over_decided, 1):.4f}"
    f" ({over_calls:,} calls; near the limit admissions are decided in Redis, refusals stay local).",
]
if limitador:
    lim = (rate("limitador-1") + rate("limitador-2")) / 2
    l_decided, l_commands = int(l_decided), int(l_commands)
    l_admitted, l_over_decided = int(l_over_admitted), int(l_over_decided)
    l_over_commands = int(l_over_commands)
    lines[lines.index("## Over-admission: three instances at their peak on one key") - 1:0] = [
        "",
        "## One hot key: hybrid against Limitador's `redis_cached`",
        "",
        "`examples/limitador-rls`: Envoy's RLS v3 on the `limitador` crate (0.14, without its"
        " default features: no RocksDB) and its `CachedRedisStorage`, flushing every"
        f" {sync_ms} ms (Limitador's default is 1 000 ms), `--worker-threads {threads}`, run between"
        " the two hybrid runs (memory, hybrid, limitador, limitador, hybrid, memory).",
    ] + ([
        "",
        "limitador 0.11 to 0.14 do not build without `disk_storage`: `storage/keys.rs` calls"
        " `bin::key_for_counter_v2` (which calls `Counter::variables_for_key`) whatever the"
        " storage, but both are declared under `#[cfg(feature = \"disk_storage\")]`, so the"
        " build stops at `unresolved module or unlinked crate bin`. Turning the feature on"
        " builds RocksDB; instead the script builds the published 0.14.0 with those two"
        " attributes removed (a copy under `target/limitador`), nothing else changed.",
    ] if limitador_patched == "1" else []) + [
        "",
        "| run | decisions/s |",
        "|---|---|",
        f"| limitador, first | {rate('limitador-1'):,.0f} |",
        f"| limitador, second | {rate('limitador-2'):,.0f} |",
        "",
        f"- **floodgate hybrid / Limitador redis_cached: {hybrid / lim:.2f}×** ({hybrid:,.0f}"
        f" against {lim:,.0f} decisions/s; goal ≥ 3×).",
        f"- Redis commands per decision: Limitador {l_commands / max(l_decided, 1):.5f}"
        f" ({l_commands:,} for {l_decided:,}), floodgate hybrid"
        f" {int(commands) / max(decided, 1):.5f}.",
    ]
    lines += [
        "",
        "## Over-admission: three Limitador instances on the same limit",
        "",
        f"- Limit {limit:,} per hour, the same key, load and length; {l_over_decided:,}"
        " requests answered.",
        f"- **Admitted {l_admitted:,}: {l_admitted / limit:.4f}× the limit (over-admission"
        f" {(l_admitted - limit) / limit * 100:+.2f} %)**; Redis counts {int(l_in_redis):,}.",
        f"- Redis commands per decision in this run: {l_over_commands / max(l_over_decided, 1):.4f}"
        f" ({l_over_commands:,} commands).",
    ]
elif limitador_note:
    lines += ["", "## Limitador's `redis_cached`", "", f"Not measured: {limitador_note}."]
lines += ["", f"Load average at the end of the run (`uptime`): {load_average}; other work shared"
          " the two vCPUs during the run."]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
