//! Runs `iocost/tests/iocost_vm.rs` inside the VM: iocost turned on for the
//! virtio disk with a model measured on its ext4 filesystem, read back from
//! `io.cost.qos` / `io.cost.model`, cached, and restored (also an operator's
//! own latency targets). The guest tests are `#[ignore]`d on the host.

mod vm_support;

#[test]
fn iocost_is_enabled_measured_and_restored_on_a_cgroup_v2_kernel() {
    let (code, stdout) = vm_support::cargo_test_in_vm(&[
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
    ]);
    assert_eq!(code, Some(0), "iocost tests failed in the VM");
    assert!(
        stdout.contains("test result: ok. 2 passed; 0 failed; 0 ignored"),
        "{stdout}"
    );
}
