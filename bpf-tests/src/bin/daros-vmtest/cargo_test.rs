//! `daros-vmtest cargo-test`: build test executables on the host, run them all in one VM.

use std::ffi::OsString;

use anyhow::Context;
use clap::Args;
use daros_bpf_tests::cargo_tests::{self, TestExecutable};
use daros_bpf_tests::vm::{EXIT_NO_STATUS, GuestCommand, RunReport};

use crate::report;
use crate::vm_args::{Format, VmArgs};

#[derive(Debug, Args)]
pub struct CargoTestArgs {
    #[command(flatten)]
    pub vm: VmArgs,
    /// `cargo test` arguments (e.g. `-p daros-agent --test cgroup_v2`), then optionally
    /// `--` and arguments for every test binary (e.g. `-- --ignored name_filter`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CARGO ARGS"
    )]
    pub args: Vec<OsString>,
}

/// Splits `[cargo args] [-- test args]`.
fn split_args(args: &[OsString]) -> (Vec<OsString>, Vec<OsString>) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.to_vec(), Vec::new()),
    }
}

/// libtest arguments: one thread (tests share the guest's cgroup tree), no colour (the
/// console is a tty), unless the caller chose otherwise.
fn test_args(user: &[OsString]) -> Vec<OsString> {
    let has = |flag: &str| user.iter().any(|a| a.to_string_lossy().starts_with(flag));
    let mut a: Vec<OsString> = Vec::new();
    if !has("--test-threads") {
        a.push("--test-threads=1".into());
    }
    if !has("--color") {
        a.extend(["--color".into(), "never".into()]);
    }
    a.extend(user.iter().cloned());
    a
}

fn command(vm: &VmArgs, t: &TestExecutable, args: &[OsString]) -> anyhow::Result<GuestCommand> {
    let label = format!("{} {} ({})", t.package, t.target, t.kind);
    let cmd = GuestCommand::new(t.path.clone())
        .args(args.iter().cloned())
        .cwd(t.manifest_dir.clone());
    Ok(vm
        .apply_env(cmd)?
        .env("CARGO_MANIFEST_DIR", t.manifest_dir.clone())
        .env("CARGO_PKG_NAME", t.package.clone())
        .label(label))
}

fn summary(report: &RunReport) -> String {
    let mut s = String::from("daros-vmtest: test binaries in the VM\n");
    for c in &report.commands {
        let verdict = match c.status {
            Some(0) => "ok".to_owned(),
            Some(n) => format!("FAILED ({n})"),
            None => "NO STATUS".to_owned(),
        };
        let secs = c
            .elapsed
            .map_or("-".into(), |d| format!("{:.1} s", d.as_secs_f64()));
        s.push_str(&format!("  {verdict:<12} {secs:>8}  {}\n", c.label));
    }
    s
}

pub fn run(args: CargoTestArgs) -> anyhow::Result<i32> {
    let (cargo_args, user_test_args) = split_args(&args.args);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let tests = match cargo_tests::build_test_executables(&cargo, &cargo_args) {
        Ok(t) => t,
        Err(cargo_tests::CargoError::BuildFailed(status)) => {
            eprintln!("daros-vmtest: cargo test --no-run failed ({status})");
            return Ok(status.code().unwrap_or(EXIT_NO_STATUS));
        }
        Err(e) => return Err(e).context("building test executables"),
    };
    if tests.is_empty() {
        anyhow::bail!("cargo built no test executables for {cargo_args:?}");
    }
    let targs = test_args(&user_test_args);
    let commands = tests
        .iter()
        .map(|t| command(&args.vm, t, &targs))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let vm = args.vm.vm()?;
    tracing::info!(binaries = commands.len(), kernel = %vm.kernel().package, "running test binaries in the VM");
    let report = match args.vm.format {
        Format::Text => vm.run(&commands, &mut std::io::stdout())?,
        Format::Json => vm.run(&commands, &mut std::io::stderr())?,
    };
    report::explain_failure(&report);
    if args.vm.format == Format::Json {
        println!("{}", report::json(&report, &vm.kernel().package));
    } else {
        eprint!("{}", summary(&report));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn cargo_and_test_args_split_at_the_first_double_dash() {
        let (c, t) = split_args(&os(&["-p", "x", "--", "--ignored", "--", "y"]));
        assert_eq!((c, t), (os(&["-p", "x"]), os(&["--ignored", "--", "y"])));
        assert_eq!(split_args(&os(&["-p", "x"])), (os(&["-p", "x"]), vec![]));
    }

    #[test]
    fn test_args_respect_the_callers_choices() {
        assert_eq!(
            test_args(&os(&["f"])),
            os(&["--test-threads=1", "--color", "never", "f"])
        );
        assert_eq!(
            test_args(&os(&["--test-threads=4", "--color=always"])),
            os(&["--test-threads=4", "--color=always"])
        );
    }
}
