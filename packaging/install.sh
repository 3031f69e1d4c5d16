#!/usr/bin/env bash
# Installs D-AROS from a build tree onto this host:
#   cargo build --release -p daros-agent --bins && cargo build --release -p daros-adapters --bin daros-shim
#   sudo ./packaging/install.sh [PREFIX]     # PREFIX defaults to /usr
# darosd, darosctl and daros-shim go to PREFIX/bin (the shim must sit beside
# darosd: darosd looks for it there unless [runtime] shim_path says otherwise),
# the systemd unit to /etc/systemd/system, the sample configuration to
# /etc/daros/agent.toml (kept when present). Nothing is started.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-/usr}"
BIN="$REPO/target/release"
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
for b in darosd darosctl daros-shim; do
    [ -x "$BIN/$b" ] || { echo "install.sh: $BIN/$b missing; build it first (see the header)" >&2; exit 1; }
done
install -d "$PREFIX/bin" /etc/daros /etc/systemd/system
install -m 0755 "$BIN/darosd" "$BIN/darosctl" "$BIN/daros-shim" "$PREFIX/bin/"
sed "s|/usr/bin/darosd|$PREFIX/bin/darosd|" "$REPO/systemd/darosd.service" >/etc/systemd/system/darosd.service
[ -e /etc/daros/agent.toml ] || install -m 0640 "$REPO/examples/agent.toml" /etc/daros/agent.toml
command -v systemctl >/dev/null && systemctl daemon-reload || true
echo "installed darosd, darosctl, daros-shim in $PREFIX/bin; start with: systemctl enable --now darosd"
