//! `daros-vmtest run`: one program in the VM.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use daros_bpf_tests::vm::GuestCommand;

use crate::report;
use crate::vm_args::{Format, VmArgs};

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// Working directory in the guest (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let cwd = match args.cwd {
        Some(c) => std::path::absolute(c).context("--cwd")?,
        None => std::env::current_dir().context("current directory")?,
    };
    let mut it = args.command.into_iter();
    let program = it.next().context("no program given")?;
    let cmd = args
        .vm
        .apply_env(GuestCommand::new(program).args(it).cwd(cwd))?;
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
            "daros-vmtest: exit {} · {}",
            report.exit_code(),
            report.timings()
        );
    }
    Ok(report.exit_code())
}
