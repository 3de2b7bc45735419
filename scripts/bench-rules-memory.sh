#!/usr/bin/env bash
# Memory per configured rule, on loopback only: floodgate (release) started with a generated
# configuration of BENCH_RULES rules and with one of no rules (the baseline, same binary, same
# run); RSS at rest (as soon as it listens, and 3 s later without traffic), after traffic
# touching every rule, and across reloads that replace every file; a third process with half
# the rules gives the slope at rest (examples/rules_memory.rs, configurations of
# testkit/src/generated_rules.rs).
#
#   scripts/bench-rules-memory.sh        # writes docs/benchmarks-rules-memory.md (about 1 minute)
#
# Overrides (environment):
#   BENCH_RULES     rules in the measured configuration         [20000]
#   BENCH_DOMAINS   domains (one file each)                      [4]
#   BENCH_RELOADS   reloads after the traffic                    [3]
#   BENCH_SETTLE_MS how long RSS is watched for its lowest value after traffic and after each reload, ms [5000]
#   BENCH_EXTRA     more `floodgate serve` flags, space-separated  [none]
#   BENCH_OUT       the report                                   [docs/benchmarks-rules-memory.md]
set -euo pipefail
cd "$(dirname "$0")/.."

RULES="${BENCH_RULES:-20000}"
DOMAINS="${BENCH_DOMAINS:-4}"
RELOADS="${BENCH_RELOADS:-3}"
SETTLE_MS="${BENCH_SETTLE_MS:-5000}"
# 20 000 generated rules are 2.5 MB of YAML, within the default caps (3 MiB, 25 000 rules).
EXTRA="${BENCH_EXTRA:-}"
OUT="${BENCH_OUT:-docs/benchmarks-rules-memory.md}"

die() { echo "bench-rules-memory: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench-common.sh
. scripts/lib/bench-common.sh
command -v python3 >/dev/null || die "python3 is needed (cargo metadata)"
[[ "$RULES" =~ ^[0-9]+$ ]] || die "BENCH_RULES must be a whole number"

start_workspace bench-rules-memory
release_build bench-rules-memory --bin floodgate --example rules_memory
extra_args=()
for flag in $EXTRA; do
  extra_args+=("--extra=$flag")
done
"$BIN/examples/rules_memory" --floodgate "$BIN/floodgate" --rules "$RULES" --domains "$DOMAINS" \
  --reloads "$RELOADS" --settle-ms "$SETTLE_MS" "${extra_args[@]}" >"$WORK/report.md"
{
  echo "# Memory per rule"
  echo
  report_provenance scripts/bench-rules-memory.sh
  echo
  echo "Bytes per rule: the difference to the 0-rule baseline of the same run, divided by the"
  echo "rule count. *At once*: as soon as the process answers a gRPC connection; *3 s later*: the"
  echo "same process 3 s after that, no traffic in between; each process read at the same moments"
  echo "after it answers. Anonymous (\`RssAnon\`) is the process's own memory, where the rules"
  echo "live; file-backed (\`RssFile\`) is the binary's and libraries' pages touched so far,"
  echo "shared with the page cache, which grow while code runs for the first time."
  echo
  cat "$WORK/report.md"
} >"$OUT"
cat "$OUT"
