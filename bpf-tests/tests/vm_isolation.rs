//! A short run of the isolation benchmark (`agent/tests/isolation_vm.rs`, the
//! full one is `scripts/bench-isolation.sh`) in the VM: cpu and io, each under
//! darosd and on plain cgroups at the same weights; it fails when darosd does
//! not isolate better than plain cgroups. Figures are printed, not judged here
//! (targets live in docs/benchmarks.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn isolation_benchmark_short_run() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args([
            "cargo-test",
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
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "the isolation run failed in the VM"
    );
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
