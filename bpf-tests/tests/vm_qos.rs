//! Runs the agent's cgroup-v2 QoS tests (`agent/tests/qos_vm.rs`) inside the VM:
//! every knob written and read back on a real v2 kernel, and for CPU, memory and
//! IO a reserved workload keeping at least 95% of its floor while a hog runs, and
//! losing it without protection. The guest tests are `#[ignore]`d on the host;
//! this test boots the VM and runs them there with `--ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn qos_enforcement_holds_floors_on_a_cgroup_v2_kernel() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args([
            "cargo-test",
            "--timeout",
            "1500",
            // The memory scenario needs a VM small enough to fill and a disk for the working set.
            "--mem",
            "768M",
            "--disk-mib",
            "512",
            "-p",
            "daros-agent",
            "--test",
            "qos_vm",
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
    assert_eq!(out.status.code(), Some(0), "QoS tests failed in the VM");
    // Every guest test ran (none filtered, none left ignored).
    assert!(stdout.contains("running 8 tests"), "{stdout}");
    assert!(
        stdout.contains("test result: ok. 8 passed; 0 failed; 0 ignored"),
        "{stdout}"
    );
}
