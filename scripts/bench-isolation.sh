#!/usr/bin/env bash
# The isolation benchmark (issue 14) in the cgroup-v2 VM: a protected workload
# at a fixed target load (its floor) beside a hog, per second achieved ÷
# target, mean / p5 / p1, and the hog's throughput kept — under darosd and on
# plain cgroups at darosd's weights, in one VM run. CI runs a 6-second version
# (bpf-tests/tests/vm_isolation.rs); this is the longer run for
# docs/benchmarks.md ("Isolation").
#   sudo ./scripts/bench-isolation.sh [SECONDS_PER_RUN]
#   DAROS_ISOLATION_DISK=direct: the VM's disk opened O_DIRECT on the host (its
#   own disk's latency and bandwidth, for iocost) instead of the host's page
#   cache; DAROS_ISOLATION_ONLY=cpu|mem|net|io: one scenario;
#   DAROS_ISOLATION_PROFILE=release (default: darosd as packaging/install.sh
#   deploys it) or debug (CI's build; under the emulator its own threads take
#   several times the CPU); DAROS_ISOLATION_IO_CEILING=1: the io scenario also
#   runs plain with the hog's queue cut to 1, 2, 4 and 8 reads in flight (what
#   the disk allows a reader at its target and a hog together);
#   DAROS_ISOLATION_IO_FACTORS=12,16: darosd and iocost-alone rows again with
#   [qos] io_cost_latency_factor at each of those; DAROS_ISOLATION_IO_CAPS=30,40:
#   plain rows with the hog held by io.max to that share of its rate alone;
#   DAROS_ISOLATION_TRACE=1: why iocost moved its vrate (io) and each second's
#   stalls and reclaim (mem).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"
SECS="${1:-30}"
DISK="${DAROS_ISOLATION_DISK:-unsafe}"
PROFILE="${DAROS_ISOLATION_PROFILE:-release}"
case "$PROFILE" in
    release) CARGO_PROFILE=(--release) ;;
    debug) CARGO_PROFILE=() ;;
    *) die "DAROS_ISOLATION_PROFILE: '$PROFILE' is neither release nor debug" ;;
esac
ONLY=()
[ -z "${DAROS_ISOLATION_ONLY:-}" ] || ONLY=(--env "DAROS_ISOLATION_ONLY=$DAROS_ISOLATION_ONLY")
[ -z "${DAROS_ISOLATION_IO_CEILING:-}" ] || ONLY+=(--env "DAROS_ISOLATION_IO_CEILING=$DAROS_ISOLATION_IO_CEILING")
[ -z "${DAROS_ISOLATION_TRACE:-}" ] || ONLY+=(--env "DAROS_ISOLATION_TRACE=$DAROS_ISOLATION_TRACE")
[ -z "${DAROS_ISOLATION_IO_CAPS:-}" ] || ONLY+=(--env "DAROS_ISOLATION_IO_CAPS=$DAROS_ISOLATION_IO_CAPS")
[ -z "${DAROS_ISOLATION_IO_FACTORS:-}" ] || ONLY+=(--env "DAROS_ISOLATION_IO_FACTORS=$DAROS_ISOLATION_IO_FACTORS")
ensure_rust
cd "$REPO"
export CARGO_INCREMENTAL=0
cargo build -q -p daros-bpf-tests --bin daros-vmtest
# The network scenario's traffic generator (and darosd's datapath loader).
cargo build -q "${CARGO_PROFILE[@]}" -p daros-ebpf --bin daros-bpf
target/debug/daros-vmtest prepare >/dev/null
say "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; the VM's disk: $DISK; darosd: $PROFILE build"
LOG="$REPO/target/bench-isolation.log"
# The whole run (the guest's output, darosd's log on failure) stays in $LOG.
if ! target/debug/daros-vmtest cargo-test --timeout 2400 --disk-mib 1536 --disk-cache "$DISK" --env "DAROS_ISOLATION_SECS=$SECS" "${ONLY[@]}" \
    --env "DAROS_BPF_BIN=$REPO/target/$PROFILE/daros-bpf" \
    "${CARGO_PROFILE[@]}" -p daros-agent --test isolation_vm -- --ignored --nocapture >"$LOG" 2>&1; then
    tail -n 60 "$LOG"
    die "the isolation run failed; its output is in $LOG"
fi
grep '^ISOLATION' "$LOG"
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
