//! Runs `iocost/tests/iocost_vm.rs` inside the VM: iocost turned on for the
//! virtio disk with a model measured on its ext4 filesystem, read back from
//! `io.cost.qos` / `io.cost.model`, cached, and restored (also an operator's
//! own latency targets). The guest tests are `#[ignore]`d on the host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn iocost_is_enabled_measured_and_restored_on_a_cgroup_v2_kernel() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args([
            "cargo-test",
            "--timeout",
            "600",
            "--disk-mib",
            "512",
            "-p",
            "daros-iocost",
            "--test",
            "iocost_vm",
            "--",
            "--ignored",
            "--show-output",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "iocost tests failed in the VM");
    assert!(
        stdout.contains("test result: ok. 2 passed; 0 failed; 0 ignored"),
        "{stdout}"
    );
}
