#!/usr/bin/env bash
# The control plane at fleet size (issue 18): three release darosd servers on
# loopback and AGENTS simulated agents (real control planes with a fake runtime,
# in the test process, release build), WORKLOADS workloads applied in batches
# through the leader's API, then a kill -9 of the leader.
#   sudo ./scripts/bench-fleet.sh [AGENTS=200] [WORKLOADS=20000] [PER_APP=10] [APPS_PER_APPLY=10] [CLIENTS=4]
# (1,000 agents and 100,000 workloads run on two cores in ~2 minutes, 3.5 GiB in the
# bench process, with DAROS_FLEET_GOSSIP=2s DAROS_FLEET_DOWN_AFTER=60s: docs/benchmarks.md)
# Other knobs: DAROS_FLEET_GOSSIP (gossip interval, default 500ms),
# DAROS_FLEET_DOWN_AFTER (default 10s), DAROS_FLEET_DELAY_MS (fake start delay, 200),
# DAROS_FLEET_SINGLES (single-application samples on the idle cluster, 20).
# Not part of CI's time budget (CI runs 20 agents and 200 workloads inside the
# test suite). Prints the results (docs/benchmarks.md, "Side by side").
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"
ensure_rust
cd "$REPO"
export CARGO_INCREMENTAL=0
export DAROS_FLEET_AGENTS="${1:-200}" DAROS_FLEET_WORKLOADS="${2:-20000}"
export DAROS_FLEET_SINGLES="${DAROS_FLEET_SINGLES:-20}"
export DAROS_FLEET_PER_APP="${3:-10}" DAROS_FLEET_BATCH="${4:-10}" DAROS_FLEET_CLIENTS="${5:-4}"
say "building darosd and the fleet bench (release)"
cargo build -q --release -p daros-agent --bin darosd -p daros-adapters --bin daros-shim
cargo test -q --release -p daros-agent --test fleet_scale --no-run 2>/dev/null
BENCH="$(ls -t target/release/deps/fleet_scale-* | grep -v '\.d$' | head -1)"
# Simulated agents hold a QUIC endpoint and a gossip socket each.
# (a host whose hard limit is lower keeps its hard limit: 500 agents need ~3,000)
ulimit -n 1048576 2>/dev/null || ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
say "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
DAROS_TEST_DAROSD="$REPO/target/release/darosd" "$BENCH" --nocapture --test-threads 1 2>&1 |
    grep -v -E '^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}T' || true
