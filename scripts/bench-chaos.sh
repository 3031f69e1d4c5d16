#!/usr/bin/env bash
# The long chaos runs (issue 12): CI runs short versions of each inside the test
# suite (30 kill cycles per kill-cycle test, one chaos cycle of each kind); this
# runs them at full length, one after the other, and prints what they counted.
#   sudo ./scripts/bench-chaos.sh [CYCLES=100]
#     - daros-gossip kill_cycles: CYCLES `kill -9`s of server agents (every
#       other one the leader) under a writing client;
#     - daros-agent control_multi kill_cycles: CYCLES `kill -9`s of the leader
#       darosd while a client applies applications through every server;
#     - daros-agent chaos: CYCLES cycles of five kinds against darosd with its
#       default timing, invariants checked against /proc and the cgroups.
# Every acknowledged write must be present afterwards; a test that finds one
# missing fails. Not part of CI's time budget. Figures: docs/benchmarks.md and
# docs/mesh.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"
CYCLES="${1:-100}"
case "$CYCLES" in
'' | *[!0-9]*) die "CYCLES: '$CYCLES' is not a whole number" ;;
esac
ensure_rust
cd "$REPO"
export CARGO_INCREMENTAL=0
export DAROS_TEST_KILL_CYCLES="$CYCLES" DAROS_CHAOS_CYCLES="$CYCLES"
say "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $CYCLES cycles each"
rc=0
mkdir -p "$REPO/target/bench-chaos"
for t in "daros-gossip kill_cycles" "daros-agent control_multi kill_cycles" "daros-agent chaos"; do
    set -- $t
    LOG="$REPO/target/bench-chaos/$1-$2.log"
    say "$1 --test $2 ${3:-} (whole output: $LOG)"
    if ! cargo test -q -p "$1" --test "$2" -- ${3:+"$3"} --nocapture --test-threads 1 >"$LOG" 2>&1; then
        rc=1
        say "FAILED: $1 --test $2"
    fi
    grep -E 'kill cycles in|cycles? [0-9]|acknowledged|failover|violation|test result|panicked' "$LOG" | tail -n 20 || true
done
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
