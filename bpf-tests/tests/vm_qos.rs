//! Runs the agent's cgroup-v2 QoS tests (`agent/tests/qos_vm.rs`) inside the VM:
//! every knob written and read back on a real v2 kernel, and for CPU, memory and
//! IO a reserved workload keeping at least 95% of its floor while a hog runs, and
//! losing it without protection. The guest tests are `#[ignore]`d on the host;
//! this test boots the VM and runs them there with `--ignored`.
mod vm_support;

#[test]
fn qos_enforcement_holds_floors_on_a_cgroup_v2_kernel() {
    let (code, stdout) = vm_support::cargo_test_in_vm(&[
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
    ]);
    assert_eq!(code, Some(0), "QoS tests failed in the VM");
    // Every guest test ran (none filtered, none left ignored).
    assert!(stdout.contains("running 8 tests"), "{stdout}");
    assert!(
        stdout.contains("test result: ok. 8 passed; 0 failed; 0 ignored"),
        "{stdout}"
    );
}
