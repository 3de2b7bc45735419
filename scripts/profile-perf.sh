#!/usr/bin/env bash
# Where floodgate's own CPU goes at peak, by function and by crate (`perf record`, the kernel
# included): floodgate on Redis (batches, `--redis-batch-max 64`, the default) and on its
# memory store, each on one worker thread, loaded in turn by the same closed loop. Every
# share of samples is turned into µs of floodgate's CPU per decision (the share times the CPU
# per decision measured over the profiled run), so the two stores read side by side and their
# difference is what the Redis call costs floodgate. A run without the profiler comes first for
# each store: the profiler's own cost is the difference between the two CPU figures. Beside
# the profile, `perf stat` counts floodgate's system calls per decision (all, and the reads,
# writes and waits among them): how many answers and Redis calls leave in one write; and the
# memory handed back to the system and faulted in again (`madvise` calls and page faults).
# With `noop` among the modes, the no-op RLS (`examples/noop_rls.rs`, one worker thread, the
# floor bench-load.sh measures floodgate against) is profiled the same way, so
# `BENCH_MODES="memory noop"` shows function by function what floodgate's decision adds at peak
# over a server that decides nothing. With `unlimited`, floodgate on its memory store with the
# same rule made `unlimited: true` (the plan, the answer, the metrics and admission as usual,
# no counter): `BENCH_MODES="memory unlimited"` shows what counting itself costs.
#
#   scripts/profile-perf.sh        # prints the report; BENCH_OUT=FILE writes it there too
#
# Needs perf (linux-perf) and the right to profile (root, or kernel.perf_event_paranoid ≤ 1 for
# the kernel's share), redis-server and redis-cli. Loopback only. The rules: one fixed window of
# 1,000,000 per minute on `generic_key=api,client_id={key}`, so every decision is admitted and
# writes its counter (as in scripts/bench-redis.sh).
#
# Overrides (environment):
#   BENCH_MODES          servers, in order: redis, memory, unlimited, noop (the no-op RLS); the
#                        report's difference column is the first less the second [redis memory]
#   BENCH_SECONDS        length of each run (unprofiled and profiled), s     [10]
#   BENCH_CLIENTS        calls in flight (loadgen --concurrency)             [50]
#   BENCH_CONNECTIONS    HTTP/2 connections they share (loadgen --connections) [4]
#   BENCH_WORKERS        the servers' worker threads (--worker-threads)      [1]
#   BENCH_KEYS           distinct {key} values                               [10000]
#   BENCH_REDIS_TIMEOUT_MS  floodgate's --redis-timeout-ms                   [100]
#   BENCH_FREQUENCY      samples per second (perf record -F)                 [999]
#   BENCH_TOP            functions listed per report                         [30]
#   BENCH_OUT            also write the report here                          [none]
#   BENCH_PREBUILT       take the binaries from this directory instead of building
set -euo pipefail
cd "$(dirname "$0")/.."

MODES="${BENCH_MODES:-redis memory}"
SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
CLIENTS="${BENCH_CLIENTS:-50}"
CONNECTIONS="${BENCH_CONNECTIONS:-4}"
WORKERS="${BENCH_WORKERS:-1}"
KEYS="${BENCH_KEYS:-10000}"
REDIS_TIMEOUT_MS="${BENCH_REDIS_TIMEOUT_MS:-100}"
FREQUENCY="${BENCH_FREQUENCY:-999}"
TOP="${BENCH_TOP:-30}"
OUT="${BENCH_OUT:-}"

die() { echo "profile-perf: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
for tool in python3 perf redis-server redis-cli; do
  command -v "$tool" >/dev/null || die "$tool is needed: scripts/install-peers.sh --bench"
done
for value in "$SECONDS_PER_RUN" "$CLIENTS" "$CONNECTIONS" "$WORKERS" "$KEYS" "$REDIS_TIMEOUT_MS" "$FREQUENCY" "$TOP"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || die "BENCH_* values must be whole numbers (got '$value')"
done
for mode in $MODES; do
  [[ "$mode" =~ ^(redis|memory|unlimited|noop)$ ]] ||
    die "BENCH_MODES: redis, memory, unlimited or noop (got '$mode')"
done

start_workspace profile-perf
release_build profile-perf --bin floodgate --example loadgen --example noop_rls

read -r REDIS_PORT < <(free_ports 1)
start_redis "$REDIS_PORT" "$WORK" "$WORK/redis.log"
REDIS_PID_KEPT="$REDIS_PID"
write_counter_config "$WORK/config" 1000000
# The same descriptor, never counted: what a decision costs without its counter.
write_client_rule_config "$WORK/config-unlimited" "{unlimited: true}"

# start_noop LOG: the no-op RLS on $WORKERS worker threads, as start_floodgate starts floodgate (its
# pid in SERVER_PID, stopped by stop_floodgate).
start_noop() {
  read -r GRPC_PORT < <(free_ports 1)
  RUST_LOG=warn "$BIN/examples/noop_rls" --addr "127.0.0.1:$GRPC_PORT" --worker-threads "$WORKERS" \
    >"$1" 2>&1 &
  SERVER_PID=$!
  PIDS=("$SERVER_PID")
  wait_port noop_rls "$SERVER_PID" "$GRPC_PORT" "$1"
}

# What perf stat counts beside the profile: every system call, and those that move the
# answers, the Redis calls and the wake-ups; and memory handed back to the system (madvise)
# and taken again (page faults).
SYSCALL_EVENTS="page-faults,syscalls:sys_enter_madvise,raw_syscalls:sys_enter,syscalls:sys_enter_writev,syscalls:sys_enter_write"
SYSCALL_EVENTS+=",syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_recvfrom"
SYSCALL_EVENTS+=",syscalls:sys_enter_epoll_wait"

# CPU seconds a process has used so far (utime + stime).
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }

# drive NAME: the closed loop against the running floodgate; figures in NAME.json, and
# "NAME CPU-SECONDS" (floodgate's, over the run) in $WORK/cpu.
drive() {
  local name="$1" before
  before="$(cpu_seconds "$SERVER_PID")"
  "$BIN/examples/loadgen" --addr "http://127.0.0.1:$GRPC_PORT" --label "$name" \
    --domain edge --descriptor 'generic_key=api,client_id={key}' --keys "$KEYS" \
    --max-rate --concurrency "$CLIENTS" --connections "$CONNECTIONS" --duration "${SECONDS_PER_RUN}s" \
    --json "$WORK/$name.json" >"$WORK/$name.txt" 2>&1 ||
    { tail -n 20 "$WORK/$name.txt" >&2; die "loadgen failed ($name)"; }
  echo "$name $(awk -v a="$(cpu_seconds "$SERVER_PID")" -v b="$before" 'BEGIN {print a - b}')" \
    >>"$WORK/cpu"
}

: >"$WORK/cpu"
for mode in $MODES; do
  case "$mode" in
    noop) start_noop "$WORK/noop.log" ;;
    memory) start_floodgate "$BIN/floodgate" "$WORK/config" "$WORK/floodgate-$mode.log" \
      --worker-threads "$WORKERS" --store memory ;;
    unlimited) start_floodgate "$BIN/floodgate" "$WORK/config-unlimited" \
      "$WORK/floodgate-$mode.log" --worker-threads "$WORKERS" --store memory ;;
    redis) start_floodgate "$BIN/floodgate" "$WORK/config" "$WORK/floodgate-$mode.log" \
      --worker-threads "$WORKERS" --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT/0" \
      --redis-batch-max 64 --redis-timeout-ms "$REDIS_TIMEOUT_MS" ;;
  esac
  PIDS+=("$REDIS_PID_KEPT")
  echo "profile-perf: $mode: unprofiled run" >&2
  drive "$mode-plain"
  echo "profile-perf: $mode: profiled run" >&2
  perf record -e cpu-clock -F "$FREQUENCY" -p "$SERVER_PID" -o "$WORK/$mode.data" \
    >"$WORK/perf-$mode.log" 2>&1 &
  PERF_PID=$!
  perf stat -x, -o "$WORK/$mode.syscalls" -p "$SERVER_PID" -e "$SYSCALL_EVENTS" \
    >"$WORK/perf-stat-$mode.log" 2>&1 &
  STAT_PID=$!
  PIDS+=("$PERF_PID" "$STAT_PID")
  sleep 0.5
  drive "$mode-profiled"
  kill -INT "$PERF_PID" "$STAT_PID" 2>/dev/null || true
  wait "$PERF_PID" "$STAT_PID" 2>/dev/null || true
  [ -s "$WORK/$mode.data" ] || { cat "$WORK/perf-$mode.log" >&2; die "perf recorded nothing ($mode)"; }
  perf report -i "$WORK/$mode.data" --stdio --no-children --sort dso,symbol --percent-limit 0 \
    -t $'\t' 2>/dev/null | grep -v '^#' | grep -v '^$' >"$WORK/$mode.symbols" ||
    die "perf report read nothing ($mode)"
  stop_floodgate
  PIDS=("$REDIS_PID_KEPT")
done

python3 - "$WORK" "$MODES" "$SECONDS_PER_RUN" "$CLIENTS" "$CONNECTIONS" "$WORKERS" "$KEYS" "$REDIS_TIMEOUT_MS" "$FREQUENCY" "$TOP" \
  "$(report_provenance scripts/profile-perf.sh)" "$(perf --version)" \
  "$(redis-server --version | awk '{print $3}')" >"$WORK/report.md" <<'PY'
import collections, json, re, sys
work, modes, seconds, clients, connections, workers, keys, timeout, frequency, top, provenance, perf, redis = sys.argv[1:]
modes, top = modes.split(), int(top)
cpu = dict((line.split()[0], float(line.split()[1])) for line in open(f"{work}/cpu"))

def decisions(name):
    total = json.load(open(f"{work}/{name}.json"))["total"]["legit"]
    return total["ok"] + total["over_limit"], total["achieved_rps"], total["error"]

def crate(dso, symbol):
    """Who a function belongs to: the kernel, the allocator, the C library, else the Rust crate
    its path starts with (the type's crate for `<T as Trait>::f`)."""
    if dso.startswith("[kernel"):
        return "kernel"
    if dso == "[vdso]":
        return "vdso (clock reads)"
    if symbol.startswith(("mi_", "_mi_")):
        return "mimalloc"
    if dso.startswith(("libc", "ld-linux", "libpthread")):
        return "libc"
    path = symbol.lstrip("<&_ ")
    path = re.sub(r"^(dyn |mut |impl )+", "", path)
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", path)
    return match.group(1) if match else "other"

per_decision, by_crate, figures = {}, {}, {}
for mode in modes:
    done, rps, errors = decisions(f"{mode}-profiled")
    plain_done, plain_rps, plain_errors = decisions(f"{mode}-plain")
    us = cpu[f"{mode}-profiled"] * 1e6 / max(done, 1)
    figures[mode] = (plain_rps, cpu[f"{mode}-plain"] * 1e6 / max(plain_done, 1), rps, us,
                     errors + plain_errors)
    functions, crates = collections.Counter(), collections.Counter()
    for line in open(f"{work}/{mode}.symbols"):
        fields = line.rstrip("\n").split("\t")
        if len(fields) < 3 or not fields[0].strip().endswith("%"):
            continue
        share = float(fields[0].strip().rstrip("%")) / 100
        dso = fields[1].strip()
        symbol = re.sub(r"^\[[.k]\] ", "", fields[2].strip())
        functions[symbol] += share * us
        crates[crate(dso, symbol)] += share * us
    per_decision[mode], by_crate[mode] = functions, crates

w = print
w("# Where floodgate's CPU goes at peak (perf)")
w()
w(provenance)
w()
w(f"- {perf}; redis-server {redis}; release build, `--worker-threads {workers}` (Redis: "
  f"`--redis-batch-max 64 --redis-timeout-ms {timeout}`); loadgen closed loop, "
  f"{clients} calls in flight over {connections} connections, `{{key}}` from {int(keys):,} values, {seconds} s per run; "
  f"`perf record -e cpu-clock -F {frequency} -p <server>` over the second run of each; "
  f"`noop`: the no-op RLS (`examples/noop_rls.rs`, `--worker-threads {workers}`), which decides nothing; "
  f"`unlimited`: the memory store with the rule `unlimited: true`, which counts nothing")
w("- *µs per decision*: the server's CPU (user + system, `/proc/<pid>/stat`) over the run "
  "divided by the decisions answered; by function and by crate: that figure times the "
  "function's share of the samples (self time, kernel included)")
w()
w("| server | decisions/s, unprofiled | CPU µs per decision, unprofiled | decisions/s, profiled | "
  "CPU µs per decision, profiled | errors |")
w("|---|--:|--:|--:|--:|--:|")
for mode in modes:
    plain_rps, plain_us, rps, us, errors = figures[mode]
    w(f"| {mode} | {plain_rps:,.0f} | {plain_us:.1f} | {rps:,.0f} | {us:.1f} | {errors:,} |")
w()
w("System calls per decision (`perf stat` over the profiled run; the sampling itself makes none "
  "in floodgate):")
w()
events = ["raw_syscalls:sys_enter", "syscalls:sys_enter_writev", "syscalls:sys_enter_write",
          "syscalls:sys_enter_sendto", "syscalls:sys_enter_read", "syscalls:sys_enter_recvfrom",
          "syscalls:sys_enter_epoll_wait"]
w("| server | all | " + " | ".join(e.split("sys_enter_")[-1] for e in events[1:]) + " |")
w("|---|" + "--:|" * len(events))
counted = {}
for mode in modes:
    counted[mode] = {}
    for line in open(f"{work}/{mode}.syscalls"):
        fields = line.strip().split(",")
        if len(fields) > 2 and fields[0].replace(".", "").isdigit():
            counted[mode][fields[2]] = float(fields[0])
def per_decision_of(mode, event):
    return counted[mode].get(event, 0) / (decisions(f"{mode}-profiled")[0] or 1)
for mode in modes:
    w(f"| {mode} | " + " | ".join(f"{per_decision_of(mode, e):.2f}" for e in events) + " |")
w()
w("Memory handed back to the system and taken again, per 1,000 decisions (the same `perf stat`): "
  "a `madvise` returns freed pages, a page fault takes one page back:")
w()
w("| server | madvise | page faults |")
w("|---|--:|--:|")
for mode in modes:
    w(f"| {mode} | {1000 * per_decision_of(mode, 'syscalls:sys_enter_madvise'):.2f} | "
      f"{1000 * per_decision_of(mode, 'page-faults'):.1f} |")
w()
first = modes[0]
other = modes[1] if len(modes) > 1 else None
heading = " | ".join(f"{mode} µs" for mode in modes)
diff = f" | {first} − {other} µs" if other else ""
w("## By crate")
w()
w(f"| crate | {heading}{diff} |")
w("|---|" + "--:|" * (len(modes) + (1 if other else 0)))
names = set().union(*(by_crate[mode] for mode in modes))
for name in sorted(names, key=lambda n: -max(by_crate[m][n] for m in modes)):
    values = [by_crate[mode][name] for mode in modes]
    if max(values) < 0.05:
        continue
    row = " | ".join(f"{v:.2f}" for v in values)
    if other:
        row += f" | {by_crate[first][name] - by_crate[other][name]:+.2f}"
    w(f"| {name} | {row} |")
w()
w(f"## By function (the {top} largest in any server)")
w()
w(f"| function | {heading}{diff} |")
w("|---|" + "--:|" * (len(modes) + (1 if other else 0)))
ranked = sorted(set().union(*(per_decision[mode] for mode in modes)),
                key=lambda n: -max(per_decision[m][n] for m in modes))
for name in ranked[:top]:
    values = [per_decision[mode][name] for mode in modes]
    row = " | ".join(f"{v:.3f}" for v in values)
    if other:
        row += f" | {per_decision[first][name] - per_decision[other][name]:+.3f}"
    shown = name if len(name) <= 110 else name[:107] + "…"
    w(f"| `{shown}` | {row} |")
PY
[ -z "$OUT" ] || { mkdir -p "$(dirname "$OUT")"; cp "$WORK/report.md" "$OUT"; }
cat "$WORK/report.md"
