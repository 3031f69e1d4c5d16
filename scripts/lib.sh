#!/usr/bin/env bash
# Shared helpers for scripts/run.sh and scripts/test.sh (sourced, not run).
# shellcheck disable=SC2034

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUST_VERSION=1.95

# Debian packages. Building the workspace needs clang/llvm/libbpf (eBPF programs).
BUILD_PACKAGES="build-essential pkg-config curl ca-certificates clang llvm libbpf-dev"
# Everything the whole test suite uses.
TEST_PACKAGES="$BUILD_PACKAGES bpftool qemu-system-x86 busybox-static cpio e2fsprogs xz-utils stress-ng fio prometheus iproute2 systemd man-db python3-venv umoci etcd-server serf nftables redis-server"
# PyPI tools the tests use, pinned (installed in a virtualenv under target/).
PY_TOOLS="kubernetes-validate==1.37.0"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Re-runs the calling script as root (cgroups, BPF and sockets under /run need it).
need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || die "run this as root (sudo is not installed)"
        exec sudo -E "$0" "$@"
    fi
}

apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        say "apt-get not found: install these packages yourself: $*"
        return 0
    fi
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        return 0
    fi
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Finds cargo (root's, the invoking user's, or PATH) or installs Rust with rustup.
ensure_rust() {
    local homes=("$HOME" /root)
    if [ -n "${SUDO_USER:-}" ]; then
        homes+=("$(getent passwd "$SUDO_USER" | cut -d: -f6)")
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        for h in "${homes[@]}"; do
            if [ -x "$h/.cargo/bin/cargo" ]; then
                export PATH="$h/.cargo/bin:$PATH"
                [ -d "$h/.rustup" ] && export RUSTUP_HOME="${RUSTUP_HOME:-$h/.rustup}"
                break
            fi
        done
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        command -v curl >/dev/null 2>&1 || die "cargo is not installed and curl is missing: install Rust $RUST_VERSION from https://rustup.rs"
        say "cargo not found: installing Rust $RUST_VERSION with rustup (https://rustup.rs)"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
            sh -s -- -y --profile minimal --default-toolchain "$RUST_VERSION" -c rustfmt,clippy
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    local have
    have="$(rustc --version | awk '{print $2}')"
    if [ "$(printf '%s\n%s\n' "$RUST_VERSION" "$have" | sort -V | head -n1)" != "$RUST_VERSION" ]; then
        command -v rustup >/dev/null 2>&1 || die "rustc $have is older than $RUST_VERSION and rustup is not available to update it"
        say "rustc $have is older than $RUST_VERSION: installing $RUST_VERSION"
        rustup toolchain install "$RUST_VERSION" --profile minimal -c rustfmt,clippy
        export RUSTUP_TOOLCHAIN="$RUST_VERSION"
    fi
    say "using $(cargo --version)"
}

# Runs the named step functions in order, reports every failure, fails if any did.
# Free space on the repository's file system, in one line: a full disk fails
# tests in ways that look like anything else (a CI run once lost four).
disk_line() {
    df -h --output=avail,size "$REPO" 2>/dev/null | awk -v r="$REPO" 'NR==2 {print "disk: " $1 " free of " $2 " (" r ")"}'
}

run_steps() {
    local failed=()
    disk_line
    local began
    for step in "$@"; do
        say "step: $step"
        began=$SECONDS
        if ! "$step"; then
            failed+=("$step")
        fi
        say "step: $step took $((SECONDS - began)) s"
        disk_line
    done
    if [ ${#failed[@]} -ne 0 ]; then
        printf 'FAILED steps: %s\n' "${failed[*]}" >&2
        return 1
    fi
    say "all steps passed: $*"
}

# Installs $PY_TOOLS into target/pytools (a virtualenv: Debian's Python is
# externally managed) and puts it first on PATH.
py_tools() {
    local venv="$REPO/target/pytools"
    if [ ! -x "$venv/bin/kubernetes-validate" ]; then
        say "installing $PY_TOOLS (PyPI) into $venv"
        python3 -m venv "$venv" && "$venv/bin/pip" install -q $PY_TOOLS || return 1
    fi
    export PATH="$venv/bin:$PATH"
}
