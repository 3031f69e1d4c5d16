#!/usr/bin/env bash
# Renders the shipped Grafana dashboard (packaging/grafana/daros.json) to
# docs/img/dashboard.png from real data: a single-node darosd running the
# sample (examples/shop.yaml) with an over-quota application beside it, the
# web server killed once and the worker scaled down and up, scraped every
# 2 s by a real Prometheus (Debian `prometheus`); each panel's queries are
# then evaluated over the window and drawn on the dashboard's grid
# (scripts/render_dashboard.py; not Grafana, which Debian does not ship).
#   sudo ./scripts/render-dashboard.sh [OUT.png]
# Environment: DAROS_RUN_RENDER_MINUTES (scenario length, default 6).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"

OUT="${1:-$REPO/docs/img/dashboard.png}"
MINUTES="${DAROS_RUN_RENDER_MINUTES:-6}"
WORK="$(mktemp -d /tmp/daros-render.XXXXXX)"
BIN="$REPO/target/debug"
SOCKET="$WORK/agent.sock"
METRICS=127.0.0.1:19464
PROM=127.0.0.1:19090
DAROSD_PID="" PROM_PID=""

ctl() { "$BIN/darosctl" --socket "$SOCKET" "$@"; }

cleanup() {
    if [ -n "$DAROSD_PID" ]; then
        ctl delete app shop >/dev/null 2>&1 || true
        for _ in $(seq 1 100); do
            ctl get apps 2>/dev/null | grep -q '^shop-team  *shop ' || break
            sleep 0.1
        done
        kill -TERM "$DAROSD_PID" 2>/dev/null || true
        wait "$DAROSD_PID" 2>/dev/null || true
    fi
    [ -n "$PROM_PID" ] && kill -TERM "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
    rm -rf "$WORK"
    # The instances' cgroups went with the application; the empty root goes too.
    find /sys/fs/cgroup -maxdepth 2 -type d -name daros-render -exec rmdir {} + 2>/dev/null || true
}
trap cleanup EXIT

apt_install $BUILD_PACKAGES busybox-static prometheus python3-matplotlib
ensure_rust
(cd "$REPO" && cargo build -p daros-agent -p daros-adapters --bins)

say "darosd (metrics on $METRICS, managed root daros-render), Prometheus on $PROM; work dir $WORK"
# No eBPF datapath: nothing pinned outside the work dir's lifetime.
DAROS_NET_ENABLED=false DAROS_METRICS_LISTEN="$METRICS" DAROS_METRICS_EVENTS_FILE="$WORK/events.jsonl" \
    "$BIN/darosd" --socket "$SOCKET" --data-dir "$WORK/data" --managed-root daros-render \
    >"$WORK/darosd.log" 2>&1 &
DAROSD_PID=$!
cat >"$WORK/prometheus.yml" <<YAML
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: darosd
    static_configs: [{targets: ["$METRICS"]}]
YAML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="$PROM" >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
for _ in $(seq 1 300); do
    ctl node >/dev/null 2>&1 && break
    kill -0 "$DAROSD_PID" 2>/dev/null || { cat "$WORK/darosd.log" >&2; DAROSD_PID=""; die "darosd exited"; }
    sleep 0.1
done
START=$(date +%s)

say "applying the sample and an application over the tenant's cpu quota"
ctl apply -f "$REPO/examples/shop.yaml" >/dev/null
sed -e 's/name: shop$/name: big/' -e '0,/cpu: {request: 250m, limit: "1"}/s//cpu: {request: "5"}/' \
    -e 's/18080/18081/g' "$REPO/examples/shop.yaml" >"$WORK/big.yaml"
ctl apply -f "$WORK/big.yaml" >/dev/null 2>&1 || true
for _ in $(seq 1 600); do ctl get apps | grep -q '^shop-team  *shop  *Running' && break; sleep 0.1; done

# The web server's main process: the httpd among the processes of its
# instance's cgroup (one of the directories darosd reports for it).
web_pid() {
    local dirs
    dirs="$(ctl workloads -o json | /usr/bin/python3 -c '
import json, sys
for w in json.load(sys.stdin)["workloads"]:
    if "shop-team.shop.web" in w["id"]:
        print("\n".join(w["paths"])); break')"
    [ -n "$dirs" ] || return 0
    for d in $dirs; do
        for p in $(cat "$d/cgroup.procs" 2>/dev/null); do
            tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'httpd -f' && { echo "$p"; return 0; }
        done
    done
}

phase_wait() { sleep $(( MINUTES * 60 / 6 )); }
phase_wait
pid="$(web_pid)"
if [ -n "$pid" ]; then say "kill -9 of the web server (pid $pid)"; kill -9 "$pid"; else say "web pid not found"; fi
phase_wait
say "worker scaled to 0, then back to 1"
ctl operate shop scale worker 0 >/dev/null
phase_wait
ctl operate shop scale worker 1 >/dev/null
phase_wait
phase_wait
phase_wait
END=$(date +%s)
curl -s "http://$METRICS/metrics" >"$WORK/metrics.txt"
say "rendering $OUT ($(grep -c '^# TYPE' "$WORK/metrics.txt") families on the page)"
/usr/bin/python3 "$REPO/scripts/render_dashboard.py" "$REPO/packaging/grafana/daros.json" "http://$PROM" "$START" "$END" "$OUT"
