#!/usr/bin/env bash
# Runs every test of the project: unit and property tests of the core, the
# store conformance suite, and the integration tests (real gRPC servers and
# real `fairway serve` processes). Needs only cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --locked --all-targets
cargo test --locked --doc
