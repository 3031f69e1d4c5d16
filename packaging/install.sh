#!/usr/bin/env bash
# Installs D-AROS from a build tree onto this host:
#   cargo build --release -p daros-agent --bins && cargo build --release -p daros-adapters --bin daros-shim
#   sudo ./packaging/install.sh [PREFIX]     # PREFIX defaults to /usr
# darosd, darosctl and daros-shim go to PREFIX/bin (the shim must sit beside
# darosd: darosd looks for it there unless [runtime] shim_path says otherwise),
# the systemd unit to /etc/systemd/system (with a drop-in that lets the agent
# see the GPUs on hosts that have NVIDIA devices), the man pages the unit names
# to PREFIX/share/man, the sample configuration to /etc/daros/agent.toml (kept
# when present). Nothing is started. BIN_DIR=... installs another build
# (default target/release).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-/usr}"
BIN="${BIN_DIR:-$REPO/target/release}"
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
for b in darosd darosctl daros-shim; do
    [ -x "$BIN/$b" ] || { echo "install.sh: $BIN/$b missing; build it first (see the header)" >&2; exit 1; }
done
install -d "$PREFIX/bin" /etc/daros /etc/systemd/system "$PREFIX/share/man"
install -m 0755 "$BIN/darosd" "$BIN/darosctl" "$BIN/daros-shim" "$PREFIX/bin/"
sed "s|/usr/bin/darosd|$PREFIX/bin/darosd|g" "$REPO/systemd/darosd.service" >/etc/systemd/system/darosd.service
# man:darosd(8) and man:darosctl(1), named by the unit's Documentation=.
"$PREFIX/bin/darosctl" man --out-dir "$PREFIX/share/man" >/dev/null
command -v mandb >/dev/null && mandb -q "$PREFIX/share/man" 2>/dev/null || true
# PrivateDevices=yes hides /dev/nvidia*: NVML needs them on GPU hosts.
if compgen -G "/dev/nvidia[0-9]*" >/dev/null || [ -e /dev/nvidiactl ]; then
    install -d /etc/systemd/system/darosd.service.d
    printf '[Service]\n# GPU telemetry (NVML) opens /dev/nvidia*.\nPrivateDevices=no\n' \
        >/etc/systemd/system/darosd.service.d/gpu.conf
fi
[ -e /etc/daros/agent.toml ] || install -m 0640 "$REPO/examples/agent.toml" /etc/daros/agent.toml
command -v systemctl >/dev/null && systemctl daemon-reload || true
echo "installed darosd, darosctl, daros-shim in $PREFIX/bin; start with: systemctl enable --now darosd"
