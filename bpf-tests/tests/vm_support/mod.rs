//! Host side of the tests that boot the VM to run a crate's guest tests:
//! `daros-vmtest cargo-test ARGS`, its output echoed for the log.
#![allow(dead_code, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The datapath binary (`daros-bpf`: darosd's loader and the traffic
/// generator of the network tests), built on the host; its path goes to the
/// guest as `DAROS_BPF_BIN` (daros-vmtest forwards DAROS_* variables and the
/// repository is shared).
pub fn daros_bpf_bin() -> PathBuf {
    let build = daros_bpf_tests::cargo_tests::cargo_command(env!("CARGO").as_ref())
        .args(["build", "-q", "-p", "daros-ebpf", "--bin", "daros-bpf"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(build.success(), "cargo build -p daros-ebpf --bin daros-bpf");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target
        .join("debug/daros-bpf")
        .canonicalize()
        .expect("daros-bpf built")
}

/// Runs `daros-vmtest cargo-test` with `args` from this crate's directory;
/// returns its exit code and stdout (both streams are printed).
pub fn cargo_test_in_vm(args: &[&str]) -> (Option<i32>, String) {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .arg("cargo-test")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run daros-vmtest");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    (out.status.code(), stdout)
}
