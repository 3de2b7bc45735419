#!/usr/bin/env bash
# The whole test suite: installs the real peers when missing, then runs every test
# (unit, property, config, gRPC over sockets, end to end with real Envoy).
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean clone compiles everything once: incremental compilation would only write caches that
# no later build reads.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# Each step's time, printed when the run ends (passed or not), so a slower CI run says where.
step_times=()
step() {
  local name=$1 began=$SECONDS status=0
  shift
  "$@" || status=$?
  step_times+=("$(printf '%4d s  %s' $((SECONDS - began)) "$name")")
  return "$status"
}
print_step_times() {
  if [ ${#step_times[@]} -gt 0 ]; then
    printf 'test.sh: %s\n' "${step_times[@]}" "$(printf '%4d s  in all' "$SECONDS")" >&2
  fi
}
trap print_step_times EXIT

step "peers" scripts/install-peers.sh
# The lints first: a format or clippy finding fails the run before the long tests start (the
# workspace denies unwrap, expect, todo and dbg; clippy.toml allows them in tests).
step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --locked --workspace --all-targets -- -D warnings
# The image's build stage has what cargo needs (no Docker here: the stage's files, then cargo);
# after clippy, so the check reuses its compiled dependencies.
step "image context" scripts/check-image-context.sh
# deploy/: Kubernetes overlays (schema, checkov), the example Envoy bootstrap, the Dockerfile.
step "deploy" scripts/validate-deploy.sh
export FLOODGATE_ENVOY="$PWD/.venv/bin/envoy"
step "build" cargo build --locked --bins --benches --examples
# Benches are built above and measured by scripts/bench-*.sh; everything else runs here.
tests=(--locked --workspace --lib --bins --tests --examples)
step "build tests" cargo test "${tests[@]}" --no-run
# RLQS's tests wait on Envoy, which reports every 5 s whatever it is told: three and a half
# minutes at a seventh of one CPU. They run beside the other areas, their output kept until
# those are done; `tests/rlqs/main.rs` sets bounds for a loaded host.
rlqs_log=target/test-rlqs.log
cargo test --locked --test rlqs -- --test-threads=2 >"$rlqs_log" 2>&1 &
rlqs=$!
trap 'kill "$rlqs" 2>/dev/null || true; print_step_times' EXIT
others=()
for main in tests/*/main.rs; do
  area=${main#tests/}
  area=${area%/main.rs}
  if [ "$area" != rlqs ]; then others+=(--test "$area"); fi
done
failed=0
step "tests" cargo test --locked --workspace --no-fail-fast --lib --bins "${others[@]}" --examples \
  -- --test-threads=2 || failed=1
rlqs_began=$SECONDS
wait "$rlqs" || failed=1
step_times+=("$(printf '%4d s  %s' $((SECONDS - rlqs_began)) "tests: rlqs, waited for after the others")")
cat "$rlqs_log"
if [ "$failed" != 0 ]; then
  echo "test.sh: tests failed (above; RLQS's in $rlqs_log)" >&2
  exit 1
fi
# The oracle against the limitador crate, a workspace of its own (tests/oracles/limitador), on
# the same target directory so it reuses what the lines above compiled.
oracle=(--locked --manifest-path tests/oracles/limitador/Cargo.toml)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
step "oracle fmt" cargo fmt --manifest-path tests/oracles/limitador/Cargo.toml -- --check
step "oracle clippy" cargo clippy "${oracle[@]}" --all-targets -- -D warnings
step "oracle tests" cargo test "${oracle[@]}" -- --test-threads=2
