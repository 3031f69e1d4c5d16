//! `daros-vmtest run` end to end: real boots of the Debian kernel under QEMU (TCG).
//! Needs qemu-system-x86, busybox-static, e2fsprogs, xz-utils and apt access to the kernel
//! package (or a cached kernel): without them every test here fails and says what to install.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};
use std::sync::Mutex;

/// These tests boot the VM themselves: inside it they would nest QEMU under TCG.
fn host_only() {
    assert!(
        std::env::var_os("DAROS_IN_VM").is_none(),
        "this test boots the VM itself: run it on the host, not inside daros-vmtest"
    );
}

/// One VM at a time: boots under TCG share two host cores with everything else.
static VM: Mutex<()> = Mutex::new(());

fn vmtest(args: &[&str]) -> Output {
    vmtest_with(args, &[])
}

fn vmtest_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let _one = VM.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_daros-vmtest"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    eprintln!(
        "--- daros-vmtest {args:?}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn output_env_and_cwd_come_back_with_status_zero() {
    host_only();
    let out = vmtest(&[
        "run",
        "--timeout",
        "300",
        "--env",
        "GREETING=two words",
        "--",
        "sh",
        "-c",
        "echo in-vm=$DAROS_IN_VM; echo cwd=$(pwd); echo greeting=$GREETING; uname -r",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("in-vm=1\n"), "{text}");
    assert!(
        text.contains(&format!("cwd={}\n", env!("CARGO_MANIFEST_DIR"))),
        "{text}"
    );
    assert!(text.contains("greeting=two words\n"), "{text}");
    assert!(
        !text.contains('\r'),
        "the console must not turn \\n into \\r\\n: {text:?}"
    );
    assert!(
        stderr(&out).contains("daros-vmtest: exit 0 · boot"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_failing_program_exit_status_comes_back() {
    host_only();
    let out = vmtest(&[
        "run",
        "--timeout",
        "300",
        "--no-disk",
        "--",
        "sh",
        "-c",
        "echo failing-now >&2; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("failing-now"),
        "stderr of the program reaches the console"
    );
}

#[test]
fn a_timeout_is_124_and_leaves_no_qemu_behind() {
    host_only();
    let out = vmtest(&[
        "run",
        "--timeout",
        "45",
        "--keep",
        "-o",
        "json",
        "--",
        "sh",
        "-c",
        "echo sleeping-now; exec sleep 600",
    ]);
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    // -o json streams the console to stderr: the program had started when it was killed.
    assert!(stderr(&out).contains("sleeping-now"), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["timed_out"], true);
    assert_eq!(report["exit_code"], 124);
    assert!(report["commands"][0]["status"].is_null());
    let job_dir = report["job_dir"].as_str().unwrap().to_owned();
    let pid = report["qemu_pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let still_there = String::from_utf8_lossy(&cmdline).contains(&job_dir);
    std::fs::remove_dir_all(&job_dir).unwrap();
    assert!(!still_there, "qemu {pid} for {job_dir} is still running");
}

#[test]
fn a_guest_that_dies_without_a_status_is_125_with_the_reason() {
    host_only();
    // sysrq 'c' crashes the kernel: oops=panic, panic=-1, -no-reboot end QEMU.
    let out = vmtest(&[
        "run",
        "--timeout",
        "300",
        "--no-disk",
        "--",
        "sh",
        "-c",
        "echo c > /proc/sysrq-trigger",
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the guest wrote no exit status"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("Kernel panic"),
        "the panic reaches the console: {}",
        stdout(&out)
    );
}

#[test]
fn a_guest_stuck_in_boot_is_shown_by_an_nmi_and_booted_once_more() {
    host_only();
    // Unknown parameters become init's arguments: this guest's init sleeps forever
    // and never reaches its job, as the guests CI saw print nothing for 600 s.
    let t0 = std::time::Instant::now();
    let out = vmtest_with(
        &[
            "run",
            "--timeout",
            "240",
            "--boot-within",
            "8",
            "--no-disk",
            "-o",
            "json",
            "--",
            "true",
        ],
        &[("DAROS_VM_KERNEL_ARGS", "rdinit=/bin/busybox sleep 3600")],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let console = stderr(&out);
    // The kernel's own words, in each boot (then again in its replayed log).
    assert!(
        console.matches("Kernel panic - not syncing: NMI").count() >= 2,
        "{console}"
    );
    assert_eq!(console.matches("booting it again").count(), 1, "{console}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stalled = report["stalled_boots"].as_array().unwrap();
    assert_eq!(stalled.len(), 2, "{report}");
    assert!(
        stalled
            .iter()
            .all(|s| s.as_str().unwrap().contains("CPU#1\nRIP=")),
        "each boot's vCPUs were read from the monitor: {report}"
    );
    assert!(report["commands"][0]["status"].is_null());
    // Two stuck boots end well before the run's limit.
    assert!(t0.elapsed().as_secs() < 120, "{:?}", t0.elapsed());
}

#[test]
fn a_guest_that_hangs_in_its_job_is_shown_by_an_nmi_and_ends_the_run() {
    host_only();
    // Two realtime spinners with RT throttling off take both vCPUs from every
    // task, the job's heartbeat too, while the kernel stays quiet: a guest busy
    // on both CPUs with no output, as two benchmark runs hung.
    let t0 = std::time::Instant::now();
    let out = vmtest(&[
        "run",
        "--timeout",
        "300",
        "--hang-after",
        "20",
        "--no-disk",
        "-o",
        "json",
        "--",
        "sh",
        "-c",
        "echo -1 > /proc/sys/kernel/sched_rt_runtime_us; echo spinning; \
         for c in 0 1; do taskset -c $c chrt -f 99 sh -c 'while :; do :; done' & done; wait",
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let console = stderr(&out);
    assert!(
        console.contains("spinning"),
        "the job had started: {console}"
    );
    assert!(
        console.contains("Kernel panic - not syncing: NMI"),
        "{console}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["hang"].as_str().unwrap().contains("CPU#1\nRIP="),
        "the vCPUs were read from the monitor: {report}"
    );
    assert!(report["stalled_boots"].as_array().unwrap().is_empty());
    assert!(
        report["failure"].as_str().unwrap().contains("hung"),
        "{report}"
    );
    // Found within the hang limit and the NMI's grace, not at the timeout.
    assert!(t0.elapsed().as_secs() < 150, "{:?}", t0.elapsed());
}
