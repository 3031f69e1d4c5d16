//! What the guest provides, checked from inside one real boot (`daros-vmtest selftest`
//! runs `daros-vmtest guest-check` in the VM): cgroup2 only, all controllers enabled,
//! knobs that read back, pids.max refusing a fork, io.max throttling the IO disk, PSI
//! files and triggers, bpffs, tracefs, BTF, loopback TCP, stress-ng and fio.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use daros_bpf_tests::guest_check::CHECKS;

/// These tests boot the VM themselves: inside it they would nest QEMU under TCG.
fn host_only() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
}
#[test]
fn guest_provides_what_the_v2_tests_need() {
    host_only();
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args(["selftest", "--timeout", "300"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    for (name, _) in CHECKS {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("ok   {name}: "))),
            "check {name} did not pass:\n{stdout}"
        );
    }
    assert!(
        stdout.contains(&format!("guest-check: {} passed, 0 failed", CHECKS.len())),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
