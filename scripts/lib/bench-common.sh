# Shared by scripts/bench-*.sh (sourced after each defines `die`): free loopback ports, waiting
# for a server to listen, the workspace and release build, one floodgate at a time, and the
# line naming what produced a report (script, commit, processor). Loopback only.

# free_ports N: N distinct free TCP ports on 127.0.0.1, held together while chosen.
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

# wait_port NAME PID PORT LOG [SECONDS]: until PORT accepts connections (SECONDS at most, 10
# unless given), or die with the log.
wait_port() {
  local name="$1" pid="$2" port="$3" log="$4" seconds="${5:-10}" _
  for _ in $(seq 1 $((seconds * 10))); do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "$name exited during start-up"; }
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2).close()" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  tail -n 20 "$log" >&2
  die "$name did not listen on 127.0.0.1:$port within $seconds s"
}

# write_counter_config DIR LIMIT [UNIT]: DIR/edge.yaml, one fixed window of LIMIT per UNIT
# (minute unless given) on `generic_key=api, client_id=<any>` (loadgen's default descriptor):
# set high, every decision is admitted and writes its counter, as most real ones do.
write_counter_config() {
  write_client_rule_config "$1" "{unit: ${3:-minute}, requests_per_unit: $2, algorithm: fixed_window}"
}

# write_client_rule_config DIR RATE_LIMIT: DIR/edge.yaml with the rule RATE_LIMIT (a YAML flow
# mapping, e.g. `{unlimited: true}`) on `generic_key=api, client_id=<any>`.
write_client_rule_config() {
  local dir="$1" rate_limit="$2"
  mkdir -p "$dir"
  cat >"$dir/edge.yaml" <<EOF
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit: $rate_limit
EOF
}

# start_redis PORT DIR LOG: a bare redis-server (no persistence) on 127.0.0.1:PORT, files in
# DIR, output to LOG; its pid in REDIS_PID (the caller adds it to what it stops), back once it
# listens.
start_redis() {
  local port="$1" dir="$2" log="$3"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    >"$log" 2>&1 &
  REDIS_PID=$!
  wait_port redis-server "$REDIS_PID" "$port" "$log"
}

# start_workspace NAME: a temporary WORK directory and a PIDS list, both cleaned up on exit
# (every pid in PIDS is stopped first); REPORT_COMMIT, the tree the run builds from, taken
# before it starts (the report names it, not later work committed meanwhile).
start_workspace() {
  REPORT_COMMIT="$(report_commit)"
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  PIDS=()
  trap stop_workspace EXIT
  trap 'exit 130' INT TERM
}

stop_workspace() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}

# release_build NAME CARGO-TARGET-ARGS…: builds them (release, or BENCH_PROFILE: `dist` is the
# shipped build, Cargo.toml says why) into BIN, or dies with the log tail.
# BENCH_PREBUILT=DIR skips the build and takes DIR as BIN (the layout of target/release: the
# binaries, examples/ below): a run of hours that must not pick up a rebuild made meanwhile.
release_build() {
  local name="$1"
  shift
  if [[ -n "${BENCH_PREBUILT:-}" ]]; then
    [[ -d "$BENCH_PREBUILT" ]] || die "BENCH_PREBUILT=$BENCH_PREBUILT is not a directory"
    echo "$name: using the binaries in $BENCH_PREBUILT (BENCH_PREBUILT), not building" >&2
    BIN="$BENCH_PREBUILT"
    return
  fi
  local profile="${BENCH_PROFILE:-release}"
  echo "$name: building ($profile): $*" >&2
  if ! cargo build --profile "$profile" "$@" >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    die "the release build failed"
  fi
  BIN="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/$profile"
}

# start_floodgate BIN CONFIG LOG [SERVE-ARGS…]: `BIN serve --config CONFIG` on three free ports
# (logging to LOG), the one pid in PIDS; sets SERVER_PID, GRPC_PORT and METRICS_PORT once gRPC
# listens.
start_floodgate() {
  local bin="$1" config="$2" log="$3" http_port
  shift 3
  read -r GRPC_PORT http_port METRICS_PORT < <(free_ports 3)
  RUST_LOG="${RUST_LOG:-warn}" "$bin" serve --config "$config" \
    --grpc-addr "127.0.0.1:$GRPC_PORT" --http-addr "127.0.0.1:$http_port" \
    --metrics-addr "127.0.0.1:$METRICS_PORT" "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  PIDS=("$SERVER_PID")
  wait_port floodgate "$SERVER_PID" "$GRPC_PORT" "$log"
}

# stop_floodgate: stops the server of start_floodgate (a fresh one starts with a full bucket).
stop_floodgate() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  PIDS=()
}

# report_commit: HEAD's short hash, with " (with uncommitted changes)" when the tree differs
# from it (untracked files included); "unknown" outside a git checkout. (The hash alone: a
# subject may hold backquotes, which would break the report's Markdown.)
report_commit() {
  local commit dirty
  commit="$(git log -1 --format='%h' 2>/dev/null)" || commit=unknown
  dirty="$(git status --porcelain 2>/dev/null)" || dirty=""
  if [ -n "$dirty" ]; then
    commit="$commit (with uncommitted changes)"
  fi
  echo "$commit"
}

# report_cpu: the processor the run sees, as `lscpu` names it ("Model name"); /proc/cpuinfo's
# name where lscpu is missing, the architecture where neither says.
report_cpu() {
  local model
  model="$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
  [ -n "$model" ] || model="$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)"
  echo "${model:-$(uname -m)}"
}

# report_provenance SCRIPT: the line a report opens with, naming what produced its figures:
# the script, the commit (REPORT_COMMIT, taken by start_workspace), the cargo profile unless
# `release`, the time, and the CPUs the run saw (their count and `lscpu` model name).
report_provenance() {
  local script="$1" commit="${REPORT_COMMIT:-}"
  [ -n "$commit" ] || commit="$(report_commit)"
  local built=""
  [ "${BENCH_PROFILE:-release}" = release ] || built=", cargo profile \`$BENCH_PROFILE\`"
  echo "Generated by \`$script\` at commit \`$commit\`$built, $(date -u '+%Y-%m-%d %H:%M UTC'), on $(nproc) CPUs ($(report_cpu), per \`lscpu\`); do not edit by hand."
}
