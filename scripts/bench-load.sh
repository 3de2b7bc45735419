#!/usr/bin/env bash
# Load benchmark over gRPC: floodgate against a no-op RateLimitService (the floor of any
# external call), with the same loads in the same run, on loopback only.
#
#   scripts/bench-load.sh            # writes docs/benchmarks-load.md (about 3 minutes)
#
# Loads (each against the no-op server, then floodgate):
#   1. peak: closed loop at full concurrency, for each of BENCH_CONCURRENCIES;
#   2. rate: open loop at half of floodgate's best peak (the p99 to hold against a target);
#   3. bots: the same rate plus bursts from BENCH_BOT_KEYS keys (counted apart).
#
# Overrides (environment):
#   BENCH_CONFIG_DIR     floodgate's --config                      [config]
#   BENCH_DOMAIN         the rate-limit domain                     [edge]
#   BENCH_DESCRIPTOR     loadgen --descriptor template             [generic_key=api,client_id={key}]
#   BENCH_KEYS           distinct {key} values                     [10000]
#   BENCH_SECONDS        length of each measured run, seconds      [10]
#   BENCH_ROUNDS         peak runs of each server at each level, taking turns (the order
#                        reversed every round, so each round's runs are side by side): the
#                        report gives each round's floodgate / no-op and their median, and
#                        its tables the round nearest that median  [1]
#   BENCH_WARMUP         warm-up before each run                   [1s]
#   BENCH_CONCURRENCIES  closed-loop concurrency levels            ["16 64"]
#   BENCH_RATE_CONCURRENCY  in-flight cap of the open-loop runs    [256]
#   BENCH_CONNECTIONS    HTTP/2 connections                        [4]
#   BENCH_LOADGEN_THREADS  loadgen runtime threads                 [1]
#   BENCH_WORKER_THREADS --worker-threads of floodgate and the no-op server  [their default]
#   BENCH_BOTS           1: run the bot-burst load, 0: skip it     [1]
#   BENCH_BOT_KEYS       keys the bots use                         [5]
#   BENCH_OUT            the report                                [docs/benchmarks-load.md]
#   BENCH_PROFILE        the cargo profile built (`dist`: the shipped build)  [release]
#   BENCH_COMPARE_ARGS   more `floodgate serve` flags for a second floodgate, loaded beside
#                        the first at each peak level (each goes first in turn), e.g.
#                        "--heavy-hitters": both rates and their ratio are printed and
#                        reported                                  [unset: none]
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG_DIR="${BENCH_CONFIG_DIR:-config}"
DOMAIN="${BENCH_DOMAIN:-edge}"
DESCRIPTOR="${BENCH_DESCRIPTOR:-generic_key=api,client_id={key}}"
KEYS="${BENCH_KEYS:-10000}"
SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
ROUNDS="${BENCH_ROUNDS:-1}"
WARMUP="${BENCH_WARMUP:-1s}"
CONCURRENCIES="${BENCH_CONCURRENCIES:-16 64}"
RATE_CONCURRENCY="${BENCH_RATE_CONCURRENCY:-256}"
CONNECTIONS="${BENCH_CONNECTIONS:-4}"
LOADGEN_THREADS="${BENCH_LOADGEN_THREADS:-1}"
WORKER_THREADS="${BENCH_WORKER_THREADS:-}"
BOTS="${BENCH_BOTS:-1}"
BOT_KEYS="${BENCH_BOT_KEYS:-5}"
OUT="${BENCH_OUT:-docs/benchmarks-load.md}"
read -r -a COMPARE_ARGS <<<"${BENCH_COMPARE_ARGS:-}"

die() { echo "bench-load: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (free ports, the report)"
[[ "$SECONDS_PER_RUN" =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a whole number of seconds"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a whole number of rounds (got '$ROUNDS')"
for c in $CONCURRENCIES; do
  [[ "$c" =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONCURRENCIES must be whole numbers (got '$c')"
done
[[ "$RATE_CONCURRENCY" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RATE_CONCURRENCY must be a whole number"
[[ -z "$WORKER_THREADS" || "$WORKER_THREADS" =~ ^[1-9][0-9]*$ ]] ||
  die "BENCH_WORKER_THREADS must be a whole number (or unset for floodgate's default)"
[ -e "$CONFIG_DIR" ] || die "no floodgate configuration at '$CONFIG_DIR' (set BENCH_CONFIG_DIR)"

start_workspace bench-load
release_build bench-load --bin floodgate --example noop_rls --example loadgen
FLOODGATE="$BIN/floodgate"
NOOP="$BIN/examples/noop_rls"
LOADGEN="$BIN/examples/loadgen"

read -r NOOP_PORT GRPC_PORT HTTP_PORT METRICS_PORT < <(free_ports 4)

"$NOOP" --addr "127.0.0.1:$NOOP_PORT" ${WORKER_THREADS:+--worker-threads "$WORKER_THREADS"} \
  >"$WORK/noop.log" 2>&1 &
NOOP_PID=$!
PIDS+=("$NOOP_PID")
RUST_LOG="${RUST_LOG:-warn}" "$FLOODGATE" serve --config "$CONFIG_DIR" \
  ${WORKER_THREADS:+--worker-threads "$WORKER_THREADS"} \
  --grpc-addr "127.0.0.1:$GRPC_PORT" --http-addr "127.0.0.1:$HTTP_PORT" \
  --metrics-addr "127.0.0.1:$METRICS_PORT" >"$WORK/floodgate.log" 2>&1 &
FLOODGATE_PID=$!
PIDS+=("$FLOODGATE_PID")
wait_port noop_rls "$NOOP_PID" "$NOOP_PORT" "$WORK/noop.log"
wait_port floodgate "$FLOODGATE_PID" "$GRPC_PORT" "$WORK/floodgate.log"
if ((${#COMPARE_ARGS[@]})); then
  read -r COMPARED_GRPC_PORT COMPARED_HTTP_PORT COMPARED_METRICS_PORT < <(free_ports 3)
  RUST_LOG="${RUST_LOG:-warn}" "$FLOODGATE" serve --config "$CONFIG_DIR" \
    ${WORKER_THREADS:+--worker-threads "$WORKER_THREADS"} \
    --grpc-addr "127.0.0.1:$COMPARED_GRPC_PORT" --http-addr "127.0.0.1:$COMPARED_HTTP_PORT" \
    --metrics-addr "127.0.0.1:$COMPARED_METRICS_PORT" "${COMPARE_ARGS[@]}" \
    >"$WORK/compared.log" 2>&1 &
  COMPARED_PID=$!
  PIDS+=("$COMPARED_PID")
  wait_port "floodgate ${COMPARE_ARGS[*]}" "$COMPARED_PID" "$COMPARED_GRPC_PORT" "$WORK/compared.log"
fi

# CPU seconds a process has used (user + system).
cpu_seconds() {
  python3 - "$1" <<'EOF'
import os, sys
with open(f"/proc/{sys.argv[1]}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
print((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
EOF
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# CPU seconds the whole machine has been busy (all CPUs), and the monotonic clock.
machine_busy() {
  python3 - <<'EOF'
import os, time
with open("/proc/stat") as f:
    cpu = [int(v) for v in f.readline().split()[1:]]
idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)
print(f"{(sum(cpu[:8]) - idle) / os.sysconf('SC_CLK_TCK')} {time.monotonic()}")
EOF
}

# run NAME SERVER LOADGEN-ARGS…: one measured load against one server; writes
# $WORK/NAME-SERVER.json with the server's CPU use added.
run() {
  local name="$1" server="$2" port pid
  shift 2
  case "$server" in
    noop) port="$NOOP_PORT" pid="$NOOP_PID" ;;
    floodgate) port="$GRPC_PORT" pid="$FLOODGATE_PID" ;;
    compared) port="$COMPARED_GRPC_PORT" pid="$COMPARED_PID" ;;
  esac
  kill -0 "$pid" 2>/dev/null || die "$server is no longer running (see its log above)"
  local json="$WORK/$name-$server.json" before after machine_before machine_after
  echo "bench-load: $name against $server" >&2
  before="$(cpu_seconds "$pid")"
  machine_before="$(machine_busy)"
  "$LOADGEN" --addr "http://127.0.0.1:$port" --label "$server" --threads "$LOADGEN_THREADS" \
    --connections "$CONNECTIONS" --domain "$DOMAIN" --descriptor "$DESCRIPTOR" --keys "$KEYS" \
    --warmup "$WARMUP" --json "$json" "$@" >"$WORK/$name-$server.txt"
  after="$(cpu_seconds "$pid")"
  machine_after="$(machine_busy)"
  python3 - "$json" "$before" "$after" "$(rss_kib "$pid")" "$*" \
    "$machine_before" "$machine_after" <<'EOF'
import json, sys
path, before, after, rss, args, machine_before, machine_after = sys.argv[1:]
with open(path) as f:
    report = json.load(f)
report["server_cpu_s"] = float(after) - float(before)
report["server_rss_kib"] = int(rss)
report["loadgen_args"] = args
# CPU the rest of the machine used meanwhile (other processes: builds, other servers...).
busy0, t0 = map(float, machine_before.split())
busy1, t1 = map(float, machine_after.split())
others = (busy1 - busy0) - report["server_cpu_s"] - (report.get("loadgen_cpu_s") or 0.0)
report["other_cpu_cores"] = max(0.0, others) / max(t1 - t0, 1e-9)
with open(path, "w") as f:
    json.dump(report, f)
EOF
  sed 's/^/    /' "$WORK/$name-$server.txt" >&2
}

# median_round LEVEL: prints each round's floodgate / no-op at LEVEL in flight and their median,
# and keeps the round nearest the median as the level's runs (peak-cLEVEL-SERVER.json), which
# the report's tables show.
median_round() {
  python3 - "$WORK" "$1" "$ROUNDS" <<'EOF'
import json, shutil, statistics, sys
work, c, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def run(r, server):
    with open(f"{work}/peak-c{c}-r{r}-{server}.json") as f:
        report = json.load(f)
    legit = report["total"]["legit"]
    return legit["achieved_rps"], report["server_cpu_s"] / max(legit["completed"], 1)
pairs = [(run(r, "floodgate"), run(r, "noop")) for r in range(1, rounds + 1)]
ratios = [f[0] / max(n[0], 1e-9) for f, n in pairs]
# CPU per answer, floodgate's over the no-op's: what a decision adds, whoever got the CPUs.
cpu_ratios = [f[1] / max(n[1], 1e-12) for f, n in pairs]
median = statistics.median(ratios)
chosen = min(range(rounds), key=lambda i: abs(ratios[i] - median)) + 1
for server in ("noop", "floodgate", "compared"):
    try:
        shutil.copy(f"{work}/peak-c{c}-r{chosen}-{server}.json", f"{work}/peak-c{c}-{server}.json")
    except FileNotFoundError:
        pass
with open(f"{work}/peak-c{c}.rounds", "w") as f:
    json.dump({"ratios": ratios, "median": median, "chosen": chosen, "cpu_ratios": cpu_ratios,
               "cpu_median": statistics.median(cpu_ratios)}, f)
print(f"bench-load: peak, {c} in flight, floodgate / no-op by round: "
      + ", ".join(f"{x:.3f}" for x in ratios) + f"; median {median:.3f}; CPU per answer "
      + ", ".join(f"{x:.3f}" for x in cpu_ratios) + f"; median {statistics.median(cpu_ratios):.3f}")
EOF
}

# compared_rate LEVEL: both floodgates' peak rates at LEVEL in flight, and their ratio.
compared_rate() {
  python3 - "$WORK" "$1" "${COMPARE_ARGS[*]}" <<'EOF'
import json, sys
work, c, args = sys.argv[1:]
f, g = (json.load(open(f"{work}/peak-c{c}-{s}.json"))["total"]["legit"]["achieved_rps"]
        for s in ("floodgate", "compared"))
print(f"bench-load: peak, {c} in flight: floodgate {f:,.0f} req/s, with {args} {g:,.0f} req/s: "
      f"{g / f:.3f}x" if f else "bench-load: floodgate answered nothing")
EOF
}

# The servers take turns, level by level and round by round (the order reversed each time), so
# none always runs on the warmer (or the more disturbed) machine and each round's runs are side
# by side: on shared cores the machine's speed drifts by more than the figure sought, and the
# ratio within a round cancels most of the drift.
turn=0
for c in $CONCURRENCIES; do
  for ((round = 1; round <= ROUNDS; round++)); do
    servers=(noop floodgate)
    if ((${#COMPARE_ARGS[@]})); then servers+=(compared); fi
    if ((turn % 2)); then
      reversed=()
      for ((i = ${#servers[@]} - 1; i >= 0; i--)); do reversed+=("${servers[i]}"); done
      servers=("${reversed[@]}")
    fi
    for server in "${servers[@]}"; do
      run "peak-c$c-r$round" "$server" --max-rate --concurrency "$c" --duration "${SECONDS_PER_RUN}s"
    done
    turn=$((turn + 1))
  done
  median_round "$c" >&2
  if ((${#COMPARE_ARGS[@]})); then compared_rate "$c" >&2; fi
done

RATE="$(python3 - "$WORK" "$CONCURRENCIES" <<'EOF'
import json, sys
work, levels = sys.argv[1], sys.argv[2].split()
peak = max(json.load(open(f"{work}/peak-c{c}-floodgate.json"))["total"]["legit"]["achieved_rps"] for c in levels)
print(max(1, int(peak / 2)))
EOF
)"
echo "bench-load: fixed rate: $RATE req/s (half of floodgate's peak)" >&2
run rate noop --rate "$RATE" --duration "${SECONDS_PER_RUN}s" --concurrency "$RATE_CONCURRENCY"
run rate floodgate --rate "$RATE" --duration "${SECONDS_PER_RUN}s" --concurrency "$RATE_CONCURRENCY"

if [ "$BOTS" = 1 ]; then
  # Bursts at half the legitimate rate, two per run: 40% of each half of the run.
  BOT_RATE=$((RATE / 2 > 0 ? RATE / 2 : 1))
  EVERY_MS=$((SECONDS_PER_RUN * 500))
  BURST="$BOT_RATE:$((EVERY_MS * 2 / 5))ms:${EVERY_MS}ms"
  for server in noop floodgate; do
    run bots "$server" --rate "$RATE" --duration "${SECONDS_PER_RUN}s" \
      --concurrency "$RATE_CONCURRENCY" --bot-burst "$BURST" --bot-keys "$BOT_KEYS"
  done
fi

kill -0 "$FLOODGATE_PID" 2>/dev/null || die "floodgate died during the benchmark"
BENCH_COMPARE_ARGS="${COMPARE_ARGS[*]}"
export BENCH_COMPARE_ARGS
mkdir -p "$(dirname "$OUT")"
BENCH_WORK="$WORK" BENCH_PROVENANCE="$(report_provenance scripts/bench-load.sh)" BENCH_NPROC="$(nproc)" \
BENCH_RUSTC="$(rustc --version)" \
BENCH_CONCURRENCIES="$CONCURRENCIES" BENCH_RATE="$RATE" BENCH_BOTS="$BOTS" \
BENCH_CONFIG_DIR="$CONFIG_DIR" BENCH_DOMAIN="$DOMAIN" BENCH_DESCRIPTOR="$DESCRIPTOR" \
BENCH_KEYS="$KEYS" BENCH_CONNECTIONS="$CONNECTIONS" BENCH_LOADGEN_THREADS="$LOADGEN_THREADS" \
BENCH_WORKER_THREADS="$WORKER_THREADS" \
BENCH_SECONDS="$SECONDS_PER_RUN" BENCH_WARMUP="$WARMUP" \
python3 - "$OUT" <<'EOF'
import json, os, re, sys

env = os.environ
work = env["BENCH_WORK"]
out = sys.argv[1]


def load(name, server):
    with open(f"{work}/{name}-{server}.json") as f:
        return json.load(f)


def us(v):
    return "–" if v is None else f"{v:,}"


def rps(v):
    return f"{v:,.0f}"


def ratio(a, b):
    return "–" if not a or not b else f"{a / b:.2f}×"


def cpu_per_req(r):
    """Server CPU per request over the whole run (legitimate and bot traffic together)."""
    done = r["total"]["legit"]["completed"] + (r["total"]["bot"] or {}).get("completed", 0)
    return "–" if not done else f"{r['server_cpu_s'] * 1e6 / done:.1f}"


HEAD = ("| server | achieved req/s | p50 µs | p90 µs | p99 µs | max µs | OK | OVER_LIMIT "
        "| error | shed | server CPU µs/req | others' CPU |\n"
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")


def row(label, r, f, cpu=True):
    return (f"| {label} | {rps(f['achieved_rps'])} | {us(f['p50_us'])} | {us(f['p90_us'])} "
            f"| {us(f['p99_us'])} | {us(f['max_us'])} | {f['ok']:,} | {f['over_limit']:,} "
            f"| {f['error']:,} | {f['shed']:,} | {cpu_per_req(r) if cpu else '(above)'} "
            f"| {others(r) if cpu else ''} |")


def others(r):
    return f"{r['other_cpu_cores']:.2f}"


def delta(a, b):
    return "–" if a is None or b is None else f"{a - b:+,} µs"


def lag(r):
    return max((s["generator_lag_max_us"] for s in r["stages"]), default=0)


def compare(n, f, open_loop=False):
    nl, fl = n["total"]["legit"], f["total"]["legit"]
    text = (f"floodgate / no-op: throughput {ratio(fl['achieved_rps'], nl['achieved_rps'])}, "
            f"p50 {ratio(fl['p50_us'], nl['p50_us'])} ({delta(fl['p50_us'], nl['p50_us'])}), "
            f"p99 {ratio(fl['p99_us'], nl['p99_us'])} ({delta(fl['p99_us'], nl['p99_us'])}).")
    if open_loop:
        text += (f" The generator ran up to {lag(n):,} µs (no-op run) and {lag(f):,} µs "
                 "(floodgate run) behind its schedule: its thread waits for a CPU too.")
    return text


lines = []
w = lines.append
w("# Load benchmark: floodgate vs a no-op RateLimitService")
w("")
w(env["BENCH_PROVENANCE"])
w("")
w(f"- {env['BENCH_RUSTC']}")
w(f"- **the load generator and the server share these {env['BENCH_NPROC']} CPUs** (loadgen on "
  f"{env['BENCH_LOADGEN_THREADS']} runtime thread(s), the servers as the next line says), so "
  "absolute figures are low and depend on the machine: read floodgate against the no-op server "
  "measured in the same run, not against other machines.")
w(f"- traffic: gRPC `ShouldRateLimit` over {env['BENCH_CONNECTIONS']} HTTP/2 connections to "
  f"127.0.0.1; domain `{env['BENCH_DOMAIN']}`, descriptor `{env['BENCH_DESCRIPTOR']}`, "
  f"`{{key}}` drawn uniformly from {int(env['BENCH_KEYS']):,} values; floodgate serves "
  f"`--config {env['BENCH_CONFIG_DIR']}` from its memory store"
  + (f"; both servers run with `--worker-threads {env['BENCH_WORKER_THREADS']}`."
     if env['BENCH_WORKER_THREADS'] else "; both servers run one thread per CPU (the default)."))
w(f"- each run: {env['BENCH_WARMUP']} unrecorded warm-up, then {env['BENCH_SECONDS']} s measured. "
  "Latency is per call (request handed to the client → whole answer), HdrHistogram at µs "
  "precision; errors are counted, not timed. *server CPU µs/req* is the server process's "
  "user+system CPU time over the run (warm-up included) divided by the requests answered "
  "(legitimate and bot together).")
w("- short runs on shared cores are noisy: throughput moves by about ±10% from run to run, "
  "p99 and max by much more (a thread waiting for a CPU shows up as tail latency). Repeat "
  "the script before reading a small difference.")
w("- *others' CPU*: cores that processes other than the server and loadgen kept busy during "
  "the run (builds, tests, other servers). Above about 0.1 the run was disturbed: rerun on a "
  "quiet machine.")
def is_copy(name):
    """peak-cLEVEL-SERVER.json: a copy of the round the tables show (its round's file counts)."""
    return re.fullmatch(r"peak-c\d+-(noop|floodgate|compared)\.json", name) is not None


runs = []
for name in sorted(os.listdir(work)):
    if name.endswith(".json") and not is_copy(name):
        with open(f"{work}/{name}") as fh:
            runs.append((name[:-5], json.load(fh)))
busiest = max(runs, key=lambda item: item[1]["other_cpu_cores"])
if busiest[1]["other_cpu_cores"] > 0.1:
    w(f"- **warning: the machine was not quiet**: other processes used up to "
      f"{busiest[1]['other_cpu_cores']:.2f} cores during the runs (`{busiest[0]}`); "
      "the figures below are disturbed.")
w("- the no-op server (`examples/noop_rls.rs`) answers OK to every descriptor and does nothing "
  "else, on the same tonic server settings: it is the floor of any external rate-limit call. "
  "Its calls are tasks of their own, as tonic runs them; floodgate with several worker threads "
  "runs a connection's calls on the connection's task (`--grpc-call-tasks`), so it can outrun "
  "this floor.")
w("")

w("## Peak throughput (closed loop)")
w("")
w("Every in-flight slot sends its next request as soon as the answer is in.")
w("")
for c in env["BENCH_CONCURRENCIES"].split():
    n, f = load(f"peak-c{c}", "noop"), load(f"peak-c{c}", "floodgate")
    w(f"### Concurrency {c}")
    w("")
    w(HEAD)
    w(row("no-op", n, n["total"]["legit"]))
    w(row("floodgate", f, f["total"]["legit"]))
    if env.get("BENCH_COMPARE_ARGS"):
        g = load(f"peak-c{c}", "compared")
        w(row(f"floodgate `{env['BENCH_COMPARE_ARGS']}`", g, g["total"]["legit"]))
    w("")
    w(compare(n, f))
    with open(f"{work}/peak-c{c}.rounds") as fh:
        rounds = json.load(fh)
    if len(rounds["ratios"]) > 1:
        w(f"Throughput floodgate / no-op in each of {len(rounds['ratios'])} rounds (the two runs of "
          "a round side by side, the order reversed every round): "
          + ", ".join(f"{x:.2f}×" for x in rounds["ratios"])
          + f"; **median {rounds['median']:.2f}×** (the table shows round {rounds['chosen']}). "
          "Server CPU per answer, floodgate / no-op, in the same rounds: "
          + ", ".join(f"{x:.2f}×" for x in rounds["cpu_ratios"])
          + f"; median {rounds['cpu_median']:.2f}×.")
    if env.get("BENCH_COMPARE_ARGS"):
        fl, gl = f["total"]["legit"], g["total"]["legit"]
        w(f"With `{env['BENCH_COMPARE_ARGS']}` / without, loaded in turn: throughput "
          f"{ratio(gl['achieved_rps'], fl['achieved_rps'])}, p99 {ratio(gl['p99_us'], fl['p99_us'])}.")
    w("")

rate = int(env["BENCH_RATE"])
n, f = load("rate", "noop"), load("rate", "floodgate")
w(f"## Fixed rate: {rate:,} req/s (half of floodgate's best peak above)")
w("")
w(f"Open loop: requests leave on schedule whatever the answers do, at most {n['concurrency']} in "
  "flight; one due while all slots are busy is not sent and counts as *shed*. This p99 is "
  "the figure to hold against a latency target.")
w("")
w(HEAD)
w(row("no-op", n, n["total"]["legit"]))
w(row("floodgate", f, f["total"]["legit"]))
w("")
w(compare(n, f, open_loop=True))
w("")

if env["BENCH_BOTS"] == "1":
    n, f = load("bots", "noop"), load("bots", "floodgate")
    w("## Fixed rate with bot bursts")
    w("")
    w(f"{rate:,} req/s of legitimate traffic as above, plus bursts `{f['bot_burst']}` "
      f"(RATE:DURATION:EVERY; bursts fill the end of each period) from {f['bot_keys']} keys "
      "(`bot0`…), on the same connections and slots. Bot traffic is counted apart; floodgate "
      "should turn most of it away (OVER_LIMIT) without hurting the legitimate p99.")
    w("")
    w(HEAD)
    w(row("no-op, legit", n, n["total"]["legit"]))
    w(row("no-op, bots", n, n["total"]["bot"], cpu=False))
    w(row("floodgate, legit", f, f["total"]["legit"]))
    w(row("floodgate, bots", f, f["total"]["bot"], cpu=False))
    w("")
    w(compare(n, f, open_loop=True))
    w("")

errors = {}
for name in os.listdir(work):
    if name.endswith(".json") and not is_copy(name):
        with open(f"{work}/{name}") as fh:
            r = json.load(fh)
        for kind, count in r.get("errors", {}).items():
            errors[f"{name[:-5]}: {kind}"] = count
if errors:
    w("## Errors")
    w("")
    for key in sorted(errors):
        w(f"- {key}: {errors[key]:,}")
    w("")

w("## Reproduce")
w("")
w("```")
w("scripts/bench-load.sh   # BENCH_* variables override the settings (see the script's header)")
w("```")
w("")
w("Loads run here (loadgen flags besides address, domain, descriptor, keys and connections):")
w("")
seen = []
for name in sorted(os.listdir(work)):
    if name.endswith("-floodgate.json") and not re.search(r"-r\d+-floodgate\.json$", name):
        with open(f"{work}/{name}") as fh:
            seen.append(f"- `{name[:-len('-floodgate.json')]}`: `{json.load(fh)['loadgen_args']}`")
lines.extend(seen)
w("")
w(f"Server memory at the end: no-op {load('rate', 'noop')['server_rss_kib'] // 1024} MiB RSS, "
  f"floodgate {load('rate', 'floodgate')['server_rss_kib'] // 1024} MiB RSS (after the fixed-rate run).")

with open(out, "w") as fh:
    fh.write("\n".join(lines) + "\n")
print(f"bench-load: wrote {out}", file=sys.stderr)
EOF
