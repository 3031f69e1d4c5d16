//! `daros-vmtest selftest`: boot the VM and run `guest-check` inside it.

use anyhow::Context;
use clap::Args;
use daros_bpf_tests::vm::GuestCommand;

use crate::report;
use crate::vm_args::{Format, VmArgs};

#[derive(Debug, Args)]
pub struct SelftestArgs {
    #[command(flatten)]
    pub vm: VmArgs,
}

pub fn run(args: SelftestArgs) -> anyhow::Result<i32> {
    let me = std::env::current_exe().context("locating daros-vmtest itself")?;
    let cmd = args
        .vm
        .apply_env(GuestCommand::new(me).args(["guest-check"]))?;
    let vm = args.vm.vm()?;
    let report = match args.vm.format {
        Format::Text => vm.run(std::slice::from_ref(&cmd), &mut std::io::stdout())?,
        Format::Json => vm.run(std::slice::from_ref(&cmd), &mut std::io::stderr())?,
    };
    report::explain_failure(&report);
    if args.vm.format == Format::Json {
        println!("{}", report::json(&report, &vm.kernel().package));
    }
    if !args.vm.quiet {
        eprintln!(
            "daros-vmtest: selftest exit {} · {}",
            report.exit_code(),
            report.timings()
        );
    }
    Ok(report.exit_code())
}
