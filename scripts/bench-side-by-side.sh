#!/usr/bin/env bash
# D-AROS beside the peers operators know, in one run on this machine (issue 18):
# Raft (3 darosd servers) beside etcd (3 members, Debian's etcd-server), same
# raft timing, same kill -9 loop, same small writes. Not part of CI's time
# budget (CI runs a 3-kill, 2-second version inside the test suite).
#   sudo ./scripts/bench-side-by-side.sh [KILLS] [SECONDS_PER_LEVEL]
# Prints markdown tables (docs/benchmarks.md, "Side by side").
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"
KILLS="${1:-20}"
SECS="${2:-10}"
command -v etcd >/dev/null 2>&1 || apt_install etcd-server
ensure_rust
cd "$REPO"
export CARGO_INCREMENTAL=0
say "building a release darosd (etcd is a release Go build)"
cargo build -q --release -p daros-agent --bin darosd
say "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
DAROS_TEST_DAROSD="$REPO/target/release/darosd" DAROS_SIDE_KILLS="$KILLS" DAROS_SIDE_SECS="$SECS" \
    cargo nextest run -p daros-agent --test side_by_side_raft --no-capture 2>&1 |
    sed -n '/^side by side/,/^| ratio/p'
