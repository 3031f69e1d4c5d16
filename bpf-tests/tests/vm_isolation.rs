//! A short run of the isolation benchmark (`agent/tests/isolation_vm.rs`, the
//! full one is `scripts/bench-isolation.sh`) in the VM: cpu, memory, network and io, each under
//! darosd and on plain cgroups at the same weights (network: no agent); it fails when darosd does
//! not isolate better than plain cgroups (only those two rows: `DAROS_ISOLATION_COMPARE_ONLY`). Figures are printed, not judged here
//! (targets live in docs/benchmarks.md).

mod vm_support;

#[test]
fn isolation_benchmark_short_run() {
    let bpf = format!("DAROS_BPF_BIN={}", vm_support::daros_bpf_bin().display());
    let (code, stdout) = vm_support::cargo_test_in_vm(&[
        "--timeout",
        "900",
        "--disk-mib",
        "1536",
        "--env",
        "DAROS_ISOLATION_SECS=6",
        "--env",
        "DAROS_ISOLATION_COMPARE_ONLY=1",
        "--env",
        &bpf,
        "-p",
        "daros-agent",
        "--test",
        "isolation_vm",
        "--",
        "--ignored",
        "--show-output",
    ]);
    assert_eq!(code, Some(0), "the isolation run failed in the VM");
    assert!(
        stdout.contains("test result: ok. 1 passed; 0 failed; 0 ignored"),
        "{stdout}"
    );
    for line in [
        "ISOLATION cpu  darosd",
        "ISOLATION cpu  plain",
        "ISOLATION mem  darosd",
        "ISOLATION mem  plain",
        "ISOLATION net  darosd",
        "ISOLATION net  plain",
        "ISOLATION io   darosd",
        "ISOLATION io   plain",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
}
