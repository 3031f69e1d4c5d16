#!/usr/bin/env bash
# Builds the container image of the node agent as an OCI image layout, with
# Debian's umoci (no daemon, no registry): darosd, darosctl and daros-shim,
# stripped (their debug info kept apart, linked by .gnu_debuglink), the
# shared libraries they load, and nothing else.
#
#   sudo ./scripts/build-image.sh [--profile release|dev] [--out DIR] [--check] [--no-build]
#
# Output (DIR defaults to target/image):
#   DIR/oci            OCI image layout, tag 0.1.0 (the DaemonSet's image)
#   DIR/debug/*.debug  the debug info of each binary
# Load it on a node, for example:
#   skopeo copy oci:target/image/oci:0.1.0 containers-storage:localhost/daros/darosd:0.1.0
#   (containerd: skopeo copy ... oci-archive:darosd.tar, then ctr -n k8s.io images import)
# --check unpacks the image again with umoci and runs `darosd --version` and
# `darosctl caps` from its root filesystem (chroot in a new mount namespace
# with the host's /proc, /sys and /dev), as CI does. --no-build takes the
# binaries already in target/<profile> (CI: those its test step built).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"

PROFILE=release
OUT="$REPO/target/image"
CHECK=false
BUILD=true
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) PROFILE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --check) CHECK=true; shift ;;
        --no-build) BUILD=false; shift ;;
        *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
case "$PROFILE" in
    release) BIN_DIR="$REPO/target/release" ;;
    dev) BIN_DIR="$REPO/target/debug" ;;
    *) die "--profile must be release or dev, got $PROFILE" ;;
esac
command -v umoci >/dev/null 2>&1 || apt_install umoci
command -v objcopy >/dev/null 2>&1 || apt_install binutils
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -1)"
TAG="$VERSION"
BINS=(darosd darosctl daros-shim)

if $BUILD; then
    say "building ${BINS[*]} ($PROFILE profile)"
    # One invocation: two would unify features differently and build most of
    # the workspace twice.
    (cd "$REPO" && cargo build -q --profile "$PROFILE" -p daros-agent -p daros-adapters \
        --bin darosd --bin darosctl --bin daros-shim)
fi

rm -rf "$OUT"
STAGE="$OUT/rootfs"
mkdir -p "$STAGE/usr/bin" "$OUT/debug" "$STAGE"/{proc,sys,dev,tmp,etc,run/daros,var/lib/daros,etc/daros}
chmod 1777 "$STAGE/tmp"
for b in "${BINS[@]}"; do
    src="$BIN_DIR/$b"
    [ -x "$src" ] || die "$src was not built"
    # Debug info apart; the binary points at it by name and CRC.
    objcopy --only-keep-debug "$src" "$OUT/debug/$b.debug"
    objcopy --strip-all --add-gnu-debuglink="$OUT/debug/$b.debug" "$src" "$STAGE/usr/bin/$b"
done
# The shared libraries the binaries load (glibc and its loader, libgcc).
# NVML is opened at run time only where a GPU exists; the NVIDIA container
# toolkit mounts it into the container then.
for b in "${BINS[@]}"; do
    ldd "$STAGE/usr/bin/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while read -r lib; do
    mkdir -p "$STAGE$(dirname "$lib")"
    cp -L "$lib" "$STAGE$lib"
done
# Users for SO_PEERCRED lookups (docs/security.md): root only.
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' >"$STAGE/etc/passwd"
printf 'root:x:0:\n' >"$STAGE/etc/group"

say "making the OCI image $OUT/oci:$TAG"
umoci init --layout "$OUT/oci"
umoci new --image "$OUT/oci:$TAG"
umoci unpack --image "$OUT/oci:$TAG" "$OUT/bundle" >/dev/null
cp -a "$STAGE/." "$OUT/bundle/rootfs/"
umoci repack --image "$OUT/oci:$TAG" "$OUT/bundle"
umoci config --image "$OUT/oci:$TAG" \
    --config.entrypoint /usr/bin/darosd \
    --config.cmd --config --config.cmd /etc/daros/agent.toml \
    --config.label "org.opencontainers.image.title=darosd" \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
umoci gc --layout "$OUT/oci"
rm -rf "$OUT/bundle" "$STAGE"

blobs=$(du -sb "$OUT/oci/blobs" | cut -f1)
say "image: $((blobs / 1024 / 1024)) MiB compressed ($OUT/oci); debug info: $(du -sh "$OUT/debug" | cut -f1) ($OUT/debug)"

if $CHECK; then
    say "checking: unpack the image and run from its root filesystem"
    CHK="$OUT/check"
    CG="daros-test-image-$$"
    cleanup() {
        # The agent's managed root of this check, in every hierarchy.
        for d in /sys/fs/cgroup/"$CG" /sys/fs/cgroup/*/"$CG"; do
            [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
        done
        rm -rf "$CHK"
    }
    trap cleanup EXIT
    rm -rf "$CHK"
    umoci unpack --image "$OUT/oci:$TAG" "$CHK" >/dev/null
    ROOT="$CHK/rootfs"
    du -sh "$ROOT" | sed 's/^/root filesystem: /' >&2
    # Only the image's files: a new mount namespace with the host's kernel
    # interfaces bound in, then chroot; darosd runs from the image (its own
    # test managed root) and darosctl asks it for the node's capabilities.
    unshare --mount --fork -- sh -euc '
        root="$1"; cg="$2"
        mount --make-rprivate /
        for d in proc sys dev; do mount --rbind "/$d" "$root/$d"; done
        chroot "$root" /usr/bin/darosd --version
        chroot "$root" /usr/bin/darosctl --version
        DAROS_NET_ENABLED=false chroot "$root" /usr/bin/darosd --socket /run/daros/agent.sock \
            --data-dir /var/lib/daros --managed-root "$cg" >"$root/tmp/darosd.log" 2>&1 &
        pid=$!
        n=0
        until [ -S "$root/run/daros/agent.sock" ]; do
            n=$((n + 1))
            if [ "$n" -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
                echo "darosd from the image did not serve its socket:" >&2
                tail -20 "$root/tmp/darosd.log" >&2
                kill "$pid" 2>/dev/null || true
                exit 1
            fi
            sleep 0.1
        done
        ok=0
        chroot "$root" /usr/bin/darosctl caps >"$root/tmp/caps.txt" || ok=1
        kill -TERM "$pid"
        wait "$pid" || true
        [ "$ok" -eq 0 ] || { cat "$root/tmp/caps.txt" >&2; exit 1; }
        head -8 "$root/tmp/caps.txt"
        grep -q "cgroup" "$root/tmp/caps.txt"
    ' sh "$ROOT" "$CG"
    say "image check passed"
fi
