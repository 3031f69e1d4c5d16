#!/usr/bin/env bash
# Installs what is needed, builds, starts a single-node darosd in the background
# and shows `darosctl top`. Ctrl-C stops both (DAROS_RUN_KEEP=1 keeps darosd).
#   sudo ./scripts/run.sh
# Environment: DAROS_RUN_DIR (state, default /tmp/daros-run),
#              DAROS_RUN_TOP_ITERATIONS (stop top after N refreshes; default: run until Ctrl-C).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"

RUN_DIR="${DAROS_RUN_DIR:-/tmp/daros-run}"
SOCKET="$RUN_DIR/agent.sock"
BIN="$REPO/target/release"
DAROSD_PID=""

build() {
    apt_install $BUILD_PACKAGES
    ensure_rust
    say "building darosd and darosctl (release)"
    (cd "$REPO" && cargo build --release -p daros-agent --bins)
}

start_darosd() {
    mkdir -p "$RUN_DIR"
    say "starting darosd: socket $SOCKET, data $RUN_DIR/data, log $RUN_DIR/darosd.log"
    "$BIN/darosd" --socket "$SOCKET" --data-dir "$RUN_DIR/data" >"$RUN_DIR/darosd.log" 2>&1 &
    DAROSD_PID=$!
    echo "$DAROSD_PID" >"$RUN_DIR/darosd.pid"
    for _ in $(seq 1 100); do
        if "$BIN/darosctl" --socket "$SOCKET" node >/dev/null 2>&1; then
            say "darosd is up (pid $DAROSD_PID)"
            return 0
        fi
        kill -0 "$DAROSD_PID" 2>/dev/null || { cat "$RUN_DIR/darosd.log" >&2; die "darosd exited"; }
        sleep 0.1
    done
    die "darosd did not answer on $SOCKET; see $RUN_DIR/darosd.log"
}

stop_darosd() {
    if [ -n "$DAROSD_PID" ] && [ "${DAROS_RUN_KEEP:-0}" != 1 ]; then
        kill -TERM "$DAROSD_PID" 2>/dev/null || true
        wait "$DAROSD_PID" 2>/dev/null || true
        say "darosd stopped"
    elif [ -n "$DAROSD_PID" ]; then
        say "darosd keeps running (pid $DAROSD_PID): $BIN/darosctl --socket $SOCKET top"
    fi
}

show_top() {
    "$BIN/darosctl" --socket "$SOCKET" caps | head -n 3
    local args=(--socket "$SOCKET" top)
    if [ -n "${DAROS_RUN_TOP_ITERATIONS:-}" ]; then
        args+=(--iterations "$DAROS_RUN_TOP_ITERATIONS")
    fi
    "$BIN/darosctl" "${args[@]}" || true
}

trap stop_darosd EXIT
build
start_darosd
# Later steps (e.g. a sample application) go here, one line each.
show_top
