//! Printing a run's outcome: the failure explanation, the summary line, the JSON report.

use daros_bpf_tests::vm::{RunReport, VmEnd};
use serde::Serialize;

#[derive(Serialize)]
struct JsonCommand<'a> {
    label: &'a str,
    status: Option<i32>,
    elapsed_s: Option<f64>,
    output: String,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    exit_code: i32,
    timed_out: bool,
    stalled_boots: &'a [String],
    hang: Option<&'a str>,
    failure: Option<String>,
    guest_boot_s: Option<f64>,
    wall_s: f64,
    job_dir: Option<String>,
    qemu_pid: u32,
    kernel: &'a str,
    commands: Vec<JsonCommand<'a>>,
}

/// The report as JSON.
pub fn json(report: &RunReport, kernel: &str) -> String {
    let r = JsonReport {
        exit_code: report.exit_code(),
        timed_out: report.end == VmEnd::TimedOut,
        stalled_boots: &report.stalled_boots,
        hang: report.hang.as_deref(),
        failure: report.vm_failure(),
        guest_boot_s: report.guest_boot.map(|d| d.as_secs_f64()),
        wall_s: report.wall.as_secs_f64(),
        job_dir: report.job_dir.as_ref().map(|p| p.display().to_string()),
        qemu_pid: report.qemu_pid,
        kernel,
        commands: report
            .commands
            .iter()
            .map(|c| JsonCommand {
                label: &c.label,
                status: c.status,
                elapsed_s: c.elapsed.map(|d| d.as_secs_f64()),
                output: String::from_utf8_lossy(&c.output).into_owned(),
            })
            .collect(),
    };
    serde_json::to_string_pretty(&r).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// On stderr: why the VM failed (with the guest kernel log), and the job dir if kept.
pub fn explain_failure(report: &RunReport) {
    if let Some(why) = report.vm_failure() {
        eprintln!("daros-vmtest: {why}");
        match (&report.dmesg, report.end) {
            (Some(d), _) => {
                eprintln!("---- guest kernel log ----\n{d}---- end of guest kernel log ----")
            }
            (None, VmEnd::Exited(_) | VmEnd::Stuck(_)) => {
                eprintln!(
                    "daros-vmtest: no guest kernel log was saved; the console above is all there is \
                     (after an NMI, the guest's panic and its log)"
                );
                if !report.qemu_stderr.trim().is_empty() {
                    eprintln!("---- qemu stderr ----\n{}", report.qemu_stderr.trim_end());
                }
            }
            (None, VmEnd::TimedOut) => {}
        }
    }
    if let Some(dir) = &report.job_dir {
        eprintln!("daros-vmtest: job directory kept at {}", dir.display());
    }
}
