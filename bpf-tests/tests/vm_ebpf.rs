//! Issue 3 item 7 on a pure cgroup-v2 host: boots the cgroup-v2 VM and runs every
//! `ebpf_*` test there (verdicts, traffic counters and caps, floors through a veth
//! pair with tbf, run-queue latency, pins, restart). On the host they run as plain
//! tests against the hybrid layout's `/sys/fs/cgroup/unified`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

mod vm_support;

/// Test functions in `tests/ebpf_*.rs`; every one must run and pass in the VM.
const EBPF_TESTS: usize = 14;

#[test]
fn ebpf_datapath_works_on_a_pure_cgroup_v2_kernel() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
    // The restart tests drive the datapath binary.
    let bin = vm_support::daros_bpf_bin();
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args(["cargo-test", "--timeout", "1800", "-p", "daros-bpf-tests"])
        .args(["--test", "ebpf_*", "--", "--show-output"])
        .env("DAROS_BPF_BIN", &bin)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert_eq!(out.status.code(), Some(0), "eBPF tests failed in the VM");
    let passed: usize = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|r| r.split(' ').next()?.parse::<usize>().ok())
        .sum();
    assert_eq!(
        passed, EBPF_TESTS,
        "every eBPF test ran and passed: {stdout}"
    );
    let ignored: usize = stdout
        .lines()
        .filter(|l| l.starts_with("test result: "))
        .filter_map(|l| l.split("; ").find_map(|f| f.strip_suffix(" ignored")))
        .filter_map(|n| n.parse::<usize>().ok())
        .sum();
    assert_eq!(
        ignored, 0,
        "no eBPF test may be left out in the VM: {stdout}"
    );
}
