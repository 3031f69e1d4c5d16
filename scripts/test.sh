#!/usr/bin/env bash
# Installs what the whole test suite needs and runs it.
#   sudo ./scripts/test.sh
# Uses cargo-nextest when installed, otherwise cargo test; never stops at the
# first failure. Steps run in order; each failing step is reported at the end.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"

workspace_tests() {
    cd "$REPO"
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest run --workspace --no-fail-fast
    else
        cargo test --workspace --no-fail-fast
    fi
}

apt_install $TEST_PACKAGES
ensure_rust
# Later steps (e.g. cgroup-v2 VM tests) are added to this list.
run_steps workspace_tests
