//! Host side of the tests that boot the VM to run a crate's guest tests:
//! `daros-vmtest cargo-test ARGS`, its output echoed for the log.
#![allow(clippy::expect_used)]

use std::process::Command;

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
