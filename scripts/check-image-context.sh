#!/usr/bin/env bash
# Checks that deploy/Dockerfile's build stage has every file its cargo build reads, without a
# Docker engine: scripts/lib/image-context.py lays out what the stage's COPY instructions take
# from the build context (minus deploy/Dockerfile.dockerignore), then cargo resolves the
# workspace there (`cargo metadata`, which fails on a workspace member the stage lacks) and
# type-checks the image's binary (`cargo check --bin floodgate`, which fails on a source file,
# proto or Lua script it lacks).
#
#   scripts/check-image-context.sh      (scripts/test.sh runs it; offline after one
#                                        `cargo fetch`)
#
# Environment:
#   IMAGE_CONTEXT_DIR   where the stage's files are laid out   [target/image-context]
#   IMAGE_CONTEXT_CHECK 0 skips the cargo check                 [1]
# The check shares the repository's target directory, so after the lints it recompiles only
# floodgate's own crates.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT="$PWD"
DIR="${IMAGE_CONTEXT_DIR:-target/image-context}"
say() { echo "check-image-context: $*" >&2; }
die() { say "$*"; exit 1; }

# `cargo metadata` resolves every target's dependencies, and the tests' builds fetch only this
# host's (limitador's postcard pulls atomic-polyfill for targets without atomics): fetch them all.
cargo fetch --locked --quiet
python3 scripts/lib/image-context.py deploy/Dockerfile "$DIR"
if ! (cd "$DIR" && cargo metadata --locked --offline --format-version 1 >/dev/null); then
  die "cargo cannot read the workspace as deploy/Dockerfile's build stage has it (above):" \
    "COPY what it lacks, and allow it in deploy/Dockerfile.dockerignore"
fi
say "cargo metadata --locked --offline: the build stage's workspace resolves"
if [ "${IMAGE_CONTEXT_CHECK:-1}" != 0 ]; then
  if ! (cd "$DIR" && CARGO_TARGET_DIR="$ROOT/target" cargo check --locked --offline --quiet --bin floodgate); then
    die "cargo check --bin floodgate fails in deploy/Dockerfile's build stage (above)"
  fi
  say "cargo check --locked --offline --bin floodgate: the image's binary builds from the stage's files"
fi
