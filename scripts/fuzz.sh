#!/usr/bin/env bash
# Runs one coverage-guided fuzz target (fuzz/, docs/fuzzing.md) under AFL++ for SECONDS:
#   scripts/fuzz.sh TARGET SECONDS
# TARGET is one of: config_loader grpc_request http_endpoints admin_api algorithms redis_lua.
#
# Installs what it needs, project-locally: cargo-afl (crates.io) into .cargo-tools/, and the
# AFL++ it bundles, built by `cargo afl config --build` into .cargo-tools/share/. Builds the
# targets instrumented (release, with debug assertions and overflow checks, as cargo-afl
# builds) into fuzz/target/, so the main target/ is untouched. Starts from fuzz/corpus/TARGET
# and writes AFL++'s findings to fuzz/out/TARGET/ (queue, crashes, hangs, fuzzer_stats).
# redis_lua gets a redis-server of its own on a free loopback port, stopped by pid at the end.
#
# Afterwards: executions, crashes, hangs and edges found are printed; a crash or hang is
# replayed by copying it into fuzz/corpus/TARGET/ and running `cargo test --test fuzz_corpus`.
# FUZZ_JOBS=N runs N fuzzer processes (one main, the rest secondaries; default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

targets="config_loader grpc_request http_endpoints admin_api algorithms redis_lua"
if [ $# -ne 2 ] || ! [[ " $targets " == *" $1 "* ]] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS   (TARGET: $targets)" >&2
  exit 2
fi
target=$1
seconds=$2
jobs=${FUZZ_JOBS:-1}

root=$PWD
export PATH="$root/.cargo-tools/bin:$PATH"
export XDG_DATA_HOME="$root/.cargo-tools/share"
if ! command -v cargo-afl >/dev/null 2>&1; then
  echo "fuzz: installing cargo-afl into .cargo-tools/"
  cargo install --locked cargo-afl --version 0.18.2 --root "$root/.cargo-tools"
fi
if ! compgen -G "$XDG_DATA_HOME/afl.rs/rustc-*/afl.rs-*/afl/bin/afl-fuzz" >/dev/null; then
  echo "fuzz: building AFL++ (cargo afl config --build) into .cargo-tools/share/"
  cargo afl config --build
fi

# An explicit --target keeps cargo-afl's flags (instrumentation, codegen-units=1) off the build
# scripts and proc macros, which then build as fast as usual.
host=$(rustc -vV | sed -n 's/^host: //p')
echo "fuzz: building $target (fuzz/target/$host/release)"
CARGO_TARGET_DIR="$root/fuzz/target" cargo afl build --release --locked --target "$host" \
  -p floodgate-fuzz --features afl --bin "$target"
binary="$root/fuzz/target/$host/release/$target"

redis_pid=""
cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
if [ "$target" = redis_lua ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis_dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$redis_dir" --logfile "$redis_dir/redis.log" &
  redis_pid=$!
  for _ in $(seq 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  export FLOODGATE_FUZZ_REDIS_URL="redis://127.0.0.1:$port/0"
  echo "fuzz: redis-server pid $redis_pid on 127.0.0.1:$port"
fi

out="$root/fuzz/out/$target"
mkdir -p "$out"
# Shared, virtual cores: no CPU pinning, no frequency checks, and a core_pattern AFL++ cannot
# change without root are all fine for finding bugs.
export AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
export AFL_AUTORESUME=1
# A decision that takes over a second is a hang (the Redis target waits on a socket).
timeout_ms=1000
pids=()
for job in $(seq "$jobs"); do
  role=-M; [ "$job" -gt 1 ] && role=-S
  cargo afl fuzz -i "$root/fuzz/corpus/$target" -o "$out" "$role" "job$job" \
    -V "$seconds" -t "$timeout_ms" -m none -- "$binary" >"$out/job$job.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done

for stats in "$out"/job*/fuzzer_stats; do
  [ -f "$stats" ] || continue
  awk -F' *: *' -v job="$(basename "$(dirname "$stats")")" '
    $1 ~ /^(execs_done|execs_per_sec|run_time|corpus_count|saved_crashes|saved_hangs|edges_found|total_edges|bitmap_cvg|stability)$/ { v[$1]=$2 }
    END { printf "fuzz: %s: %s executions in %s s (%s/s), crashes %s, hangs %s, edges %s of %s (%s), corpus %s, stability %s\n",
      job, v["execs_done"], v["run_time"], v["execs_per_sec"], v["saved_crashes"], v["saved_hangs"],
      v["edges_found"], v["total_edges"], v["bitmap_cvg"], v["corpus_count"], v["stability"] }' "$stats"
done
found=$(find "$out"/job*/crashes "$out"/job*/hangs -type f ! -name README.txt 2>/dev/null | wc -l)
if [ "$found" -gt 0 ]; then
  echo "fuzz: $found crashing or hanging inputs under $out/job*/{crashes,hangs}" >&2
  exit 1
fi
exit "$status"
