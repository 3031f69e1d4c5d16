#!/usr/bin/env bash
# Installs what the whole test suite needs and runs it.
#   sudo ./scripts/test.sh
# Uses cargo-nextest when installed, otherwise cargo test; never stops at the
# first failure. Steps run in order; each failing step is reported at the end.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
need_root "$@"
# One build per run: incremental caches would only add gigabytes of disk.
export CARGO_INCREMENTAL=0

workspace_tests() {
    cd "$REPO" || return 1
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest run --workspace --no-fail-fast
    else
        cargo test --workspace --no-fail-fast
    fi
}

# Patched dependencies' own suites (vendor/README.md): the workspace's tests
# exercise them only through our code.
vendored_tests() {
    cd "$REPO" &&
    CARGO_TARGET_DIR="$REPO/target/vendor" cargo test --locked --manifest-path vendor/foca/Cargo.toml \
        --features std,postcard-codec
}

# The agent's sensing, API and CLI tests again on a pure cgroup-v2 kernel
# (this host may be hybrid); see docs/vm-tests.md.
vm_agent_tests() {
    # set -e does not apply inside run_steps' condition: chain with &&.
    cd "$REPO" &&
    cargo build -q -p daros-bpf-tests --bin daros-vmtest &&
    target/debug/daros-vmtest prepare &&
    target/debug/daros-vmtest cargo-test --timeout 1800 -p daros-agent \
        --test sensing --test gpu_mapping --test api_cli --test config_cli --test kube_policies
}

# The systemd deployment under a real systemd: the VM booted with systemd as
# PID 1 installs this build with packaging/install.sh and runs it as a service.
vm_systemd_tests() {
    cd "$REPO" &&
    cargo build -q -p daros-bpf-tests --bin daros-vmtest &&
    cargo build -q -p daros-adapters --bin daros-shim &&
    target/debug/daros-vmtest prepare &&
    target/debug/daros-vmtest cargo-test --systemd --timeout 600 -p daros-agent \
        --test systemd_vm
}

# The container image (packaging/kubernetes): built with umoci from the dev
# binaries the workspace step built (a release build would add ~18 min on
# 2 cores; the recipe is the same), then run from its root filesystem.
image_check() {
    "$REPO/scripts/build-image.sh" --profile dev --no-build --out "$REPO/target/image-check" --check &&
    rm -rf "$REPO/target/image-check"
}

apt_install $TEST_PACKAGES
ensure_rust
# Without PyPI the manifest validation test says SKIPPED instead of stopping the suite.
py_tools || say "WARNING: could not install $PY_TOOLS: packaging/kubernetes is not validated in this run"
# One step per line; later issues add theirs here.
run_steps \
    workspace_tests \
    vendored_tests \
    image_check \
    vm_agent_tests \
    vm_systemd_tests
