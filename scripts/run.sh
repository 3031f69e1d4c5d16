#!/usr/bin/env bash
# Installs what is needed, builds, starts a single-node darosd in the background,
# applies the sample application (examples/shop.yaml), waits until it is Running
# and shows `darosctl top`. Ctrl-C deletes the sample and stops darosd
# (DAROS_RUN_KEEP=1 keeps both running).
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
    # busybox: the sample's web server (httpd) and worker (wget).
    apt_install $BUILD_PACKAGES busybox-static
    ensure_rust
    say "building darosd, darosctl and daros-shim (release)"
    # One invocation: features are unified, nothing is built twice.
    (cd "$REPO" && cargo build --release -p daros-agent -p daros-adapters --bins)
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

# Workloads outlive darosd by design (re-adopted on restart): the sample is
# deleted first so that stopping leaves no process behind.
delete_sample() {
    if [ -n "$DAROSD_PID" ] && [ "${DAROS_RUN_KEEP:-0}" != 1 ]; then
        "$BIN/darosctl" --socket "$SOCKET" delete app shop >/dev/null 2>&1 || true
        for _ in $(seq 1 100); do
            "$BIN/darosctl" --socket "$SOCKET" get apps 2>/dev/null | grep -q '^shop-team  *shop ' || break
            sleep 0.1
        done
        say "sample application deleted"
    fi
}

stop_darosd() {
    delete_sample
    if [ -n "$DAROSD_PID" ] && [ "${DAROS_RUN_KEEP:-0}" != 1 ]; then
        kill -TERM "$DAROSD_PID" 2>/dev/null || true
        wait "$DAROSD_PID" 2>/dev/null || true
        say "darosd stopped"
    elif [ -n "$DAROSD_PID" ]; then
        say "darosd keeps running (pid $DAROSD_PID): $BIN/darosctl --socket $SOCKET top"
    fi
}

apply_sample() {
    say "applying the sample application: darosctl apply -f examples/shop.yaml"
    "$BIN/darosctl" --socket "$SOCKET" apply -f "$REPO/examples/shop.yaml"
    for _ in $(seq 1 600); do
        if "$BIN/darosctl" --socket "$SOCKET" get apps | grep -q '^shop-team  *shop  *Running'; then
            "$BIN/darosctl" --socket "$SOCKET" get apps
            # top lists cgroups once discovery (every 5 s) has seen them.
            for _ in $(seq 1 150); do
                "$BIN/darosctl" --socket "$SOCKET" workloads 2>/dev/null | grep -q 'shop-team.shop.worker' && break
                sleep 0.1
            done
            say "sample application Running: darosctl --socket $SOCKET describe app shop | logs shop-team/shop/worker -f"
            return 0
        fi
        sleep 0.1
    done
    "$BIN/darosctl" --socket "$SOCKET" describe app shop >&2 || true
    die "the sample application is not Running after 60 s; see $RUN_DIR/darosd.log"
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
# Later steps go here, one line each.
apply_sample
show_top
