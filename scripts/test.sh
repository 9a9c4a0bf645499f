#!/usr/bin/env bash
# Runs every test of the project: unit and property tests of the core, the
# store conformance suite, and the integration tests (real gRPC servers and
# real `fairway serve` processes). Ends with one line counting them all.
set -euo pipefail
cd "$(dirname "$0")/.."

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

cargo test --locked --all-targets 2>&1 | tee "$log"

awk '/^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i + 1) ~ /^passed/) passed += $i
         if ($(i + 1) ~ /^failed/) failed += $i
         if ($(i + 1) ~ /^ignored/) ignored += $i
       }
     }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
