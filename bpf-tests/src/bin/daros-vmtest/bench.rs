//! `daros-vmtest bench`: boot the VM several times and print boot time and per-run overhead.

use std::ffi::OsString;

use clap::Args;
use daros_bpf_tests::vm::GuestCommand;

use crate::vm_args::{Format, VmArgs};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// Number of boots.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Program run in each boot (default: true).
    #[arg(last = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// min / median / max of `v` (sorted in place).
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    match (v.first(), v.get(v.len() / 2), v.last()) {
        (Some(lo), Some(mid), Some(hi)) => (*lo, *mid, *hi),
        _ => (f64::NAN, f64::NAN, f64::NAN),
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let mut argv = args.command.into_iter();
    let program = argv.next().unwrap_or_else(|| "true".into());
    let cmd = args.vm.apply_env(GuestCommand::new(program).args(argv))?;
    let vm = args.vm.vm()?;
    let load_before = loadavg();
    let (mut boot, mut total, mut overhead, mut prog) = (vec![], vec![], vec![], vec![]);
    for i in 1..=args.runs {
        let report = vm.run(std::slice::from_ref(&cmd), &mut std::io::sink())?;
        if report.exit_code() != 0 {
            eprintln!(
                "daros-vmtest: bench run {i} failed with {}",
                report.exit_code()
            );
            crate::report::explain_failure(&report);
            return Ok(report.exit_code());
        }
        let p = report
            .commands
            .iter()
            .filter_map(|c| c.elapsed)
            .map(|d| d.as_secs_f64())
            .sum::<f64>();
        let (b, t) = (
            report.guest_boot.map_or(f64::NAN, |d| d.as_secs_f64()),
            report.wall.as_secs_f64(),
        );
        if args.vm.format == Format::Text {
            println!(
                "run {i}: boot {b:.2} s, program {p:.2} s, total {t:.2} s, overhead {:.2} s",
                t - p
            );
        }
        boot.push(b);
        total.push(t);
        overhead.push(t - p);
        prog.push(p);
    }
    let load_after = loadavg();
    let (b, t, o, p) = (
        spread(&mut boot),
        spread(&mut total),
        spread(&mut overhead),
        spread(&mut prog),
    );
    match args.vm.format {
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "runs": args.runs, "cpus": args.vm.cpus, "mem_mib": args.vm.mem,
                "kernel": vm.kernel().package, "loadavg_before": load_before, "loadavg_after": load_after,
                "boot_s": [b.0, b.1, b.2], "program_s": [p.0, p.1, p.2],
                "total_s": [t.0, t.1, t.2], "overhead_s": [o.0, o.1, o.2],
            })
        ),
        Format::Text => {
            println!(
                "{} runs, {} vCPUs, {} MiB, kernel {}",
                args.runs,
                args.vm.cpus,
                args.vm.mem,
                vm.kernel().package
            );
            println!("host load average before: {load_before}; after: {load_after}");
            println!("                    min   median     max");
            for (name, (lo, mid, hi)) in [
                ("guest boot", b),
                ("program", p),
                ("total", t),
                ("overhead", o),
            ] {
                println!("{name:<12} {lo:>9.2} s {mid:>6.2} s {hi:>6.2} s");
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_min_median_max() {
        assert_eq!(spread(&mut [3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(spread(&mut [5.0]), (5.0, 5.0, 5.0));
        assert!(spread(&mut []).0.is_nan());
    }
}
