#!/usr/bin/env bash
# D-AROS beside the peers operators know, in one run on this machine (issue 18).
#   sudo ./scripts/bench-side-by-side.sh [raft] [KILLS] [SECONDS_PER_LEVEL]
#     Raft (3 darosd servers) beside etcd (3 members, Debian's etcd-server), same
#     raft timing, same kill -9 loop, same small writes.
#   sudo ./scripts/bench-side-by-side.sh gossip [NODES...]
#     Gossip: N D-AROS members (darosd's SWIM membership) and N `serf agent`
#     processes (Debian's serf), same scenario, bytes counted by nftables; one
#     table per N (default 100 150). DAROS_GOSSIP_ONLY=daros|serf runs one side.
# Not part of CI's time budget (CI runs a 3-kill, 2-second version of the raft
# one inside the test suite). Prints markdown tables (docs/benchmarks.md, "Side by side").
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"
MODE=raft
case "${1:-}" in
raft | gossip)
    MODE="$1"
    shift
    ;;
esac
ensure_rust
cd "$REPO"
export CARGO_INCREMENTAL=0

if [ "$MODE" = gossip ]; then
    command -v serf >/dev/null 2>&1 || apt_install serf
    command -v nft >/dev/null 2>&1 || apt_install nftables
    say "building the gossip bench (release)"
    cargo bench -q -p daros-gossip --bench side_by_side_gossip --no-run 2>/dev/null
    BENCH="$(ls -t target/release/deps/side_by_side_gossip-* | grep -v '\.d$' | head -1)"
    [ $# -gt 0 ] || set -- 100 150
    for n in "$@"; do
        say "gossip, $n members each; load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
        "$BENCH" "$n"
    done
    exit 0
fi

KILLS="${1:-20}"
SECS="${2:-10}"
command -v etcd >/dev/null 2>&1 || apt_install etcd-server
say "building a release darosd (etcd is a release Go build)"
cargo build -q --release -p daros-agent --bin darosd
say "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
DAROS_TEST_DAROSD="$REPO/target/release/darosd" DAROS_SIDE_KILLS="$KILLS" DAROS_SIDE_SECS="$SECS" \
    cargo nextest run -p daros-agent --test side_by_side_raft --no-capture 2>&1 |
    sed -n '/^side by side/,/^etcd new leader seen/p'
