#!/usr/bin/env bash
# The whole test suite: installs the real peers when missing, then runs every test
# (unit, property, config, gRPC over sockets, end to end with real Envoy).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-peers.sh
# The lints first: a format or clippy finding fails the run before the long tests start (the
# workspace denies unwrap, expect, todo and dbg; clippy.toml allows them in tests).
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
# The image's build stage has what cargo needs (no Docker here: the stage's files, then cargo);
# after clippy, so the check reuses its compiled dependencies.
scripts/check-image-context.sh
# deploy/: Kubernetes overlays (schema, checkov), the example Envoy bootstrap, the Dockerfile.
scripts/validate-deploy.sh
export FLOODGATE_ENVOY="$PWD/.venv/bin/envoy"
cargo build --locked --bins --benches --examples
# Benches are built above and measured by scripts/bench-*.sh; everything else runs here.
cargo test --locked --workspace --no-fail-fast --lib --bins --tests --examples -- --test-threads=2
# The oracle against the limitador crate, a workspace of its own (tests/oracles/limitador), on
# the same target directory so it reuses what the lines above compiled.
oracle=(--locked --manifest-path tests/oracles/limitador/Cargo.toml)
cargo fmt --manifest-path tests/oracles/limitador/Cargo.toml -- --check
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" cargo clippy "${oracle[@]}" --all-targets -- -D warnings
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" cargo test "${oracle[@]}" -- --test-threads=2
