//! `daros-vmtest cargo-test` end to end: cargo builds this very test file on the host,
//! and its two `guest_*` tests run inside one VM. They are `#[ignore]`d because they only
//! make sense in the guest; the host test below runs them there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// These tests boot the VM themselves: inside it they would nest QEMU under TCG.
fn host_only() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
}
fn assert_in_vm() {
    assert_eq!(
        std::env::var("DAROS_IN_VM").as_deref(),
        Ok("1"),
        "this test runs only inside the VM"
    );
}

#[test]
#[ignore = "guest side of cargo_test_runs_test_binaries_in_the_vm: runs only inside the VM"]
fn guest_sees_pure_cgroup2_and_cargo_env() {
    assert_in_vm();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let cg: Vec<&str> = mounts.lines().filter(|l| l.contains(" cgroup")).collect();
    assert_eq!(cg.len(), 1, "{cg:?}");
    assert!(
        cg[0].starts_with("cgroup2 /sys/fs/cgroup cgroup2 "),
        "{cg:?}"
    );
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    assert_eq!(
        std::env::current_dir().unwrap().to_str(),
        Some(manifest.as_str())
    );
    println!("guest-marker: cgroup2 ok in {manifest}");
}

#[test]
#[ignore = "guest side of cargo_test_runs_test_binaries_in_the_vm: runs only inside the VM"]
fn guest_fails_when_asked() {
    assert_in_vm();
    if std::env::var("DAROS_TEST_FAIL_ON_PURPOSE").as_deref() == Ok("1") {
        panic!("failing on purpose");
    }
}

#[test]
fn cargo_test_runs_test_binaries_in_the_vm() {
    host_only();
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args([
            "cargo-test",
            "--timeout",
            "300",
            "--no-disk",
            "--env",
            "DAROS_TEST_FAIL_ON_PURPOSE=1",
        ])
        .args([
            "-p",
            "daros-bpf-tests",
            "--test",
            "vm_cargo_test",
            "--",
            "--ignored",
            "--show-output",
            "guest_",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert!(
        stdout.contains("test guest_sees_pure_cgroup2_and_cargo_env ... ok"),
        "{stdout}"
    );
    // Printed by a passing test: shown because --show-output reached the binary.
    assert!(stdout.contains("guest-marker: cgroup2 ok in"), "{stdout}");
    assert!(
        stdout.contains("test guest_fails_when_asked ... FAILED"),
        "{stdout}"
    );
    assert!(stdout.contains("failing on purpose"), "{stdout}");
    assert!(
        stdout.contains("running 2 tests"),
        "exactly the two guest tests ran: {stdout}"
    );
    assert!(
        stderr.contains("FAILED (101)"),
        "summary names the failed binary: {stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(101),
        "a failed test binary fails the run"
    );
}
