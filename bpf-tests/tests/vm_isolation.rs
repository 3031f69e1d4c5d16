//! A short run of the isolation benchmark (`agent/tests/isolation_vm.rs`, the
//! full one is `scripts/bench-isolation.sh`) in the VM: cpu and io, each under
//! darosd and on plain cgroups at the same weights; it fails when darosd does
//! not isolate better than plain cgroups. Figures are printed, not judged here
//! (targets live in docs/benchmarks.md).

mod vm_support;

#[test]
fn isolation_benchmark_short_run() {
    let (code, stdout) = vm_support::cargo_test_in_vm(&[
        "--timeout",
        "900",
        "--disk-mib",
        "512",
        "--env",
        "DAROS_ISOLATION_SECS=6",
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
        "ISOLATION io   darosd",
        "ISOLATION io   plain",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
}
