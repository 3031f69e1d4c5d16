//! `daros-vmtest`: runs programs and test binaries in a throwaway QEMU VM whose kernel
//! has only cgroup v2. See `docs/vm-tests.md`.

mod bench;
mod cargo_test;
mod guest_check;
mod prepare;
mod report;
mod run;
mod selftest;
mod vm_args;

use clap::{Parser, Subcommand};

/// Run programs and test binaries in a pure cgroup-v2 VM (Debian kernel, QEMU TCG).
#[derive(Parser)]
#[command(name = "daros-vmtest", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one program in the VM; stream its output and exit with its status
    /// (124 = timeout, 125 = the guest wrote no status).
    Run(run::RunArgs),
    /// Build test executables with `cargo test --no-run` on the host and run them all in
    /// one VM with `--test-threads=1 --color never`.
    CargoTest(cargo_test::CargoTestArgs),
    /// Fetch and cache the guest kernel and build the initramfs (CI does this once).
    Prepare(prepare::PrepareArgs),
    /// Boot the VM several times and print boot time and per-run overhead.
    Bench(bench::BenchArgs),
    /// Boot the VM and run `guest-check` in it.
    Selftest(selftest::SelftestArgs),
    /// Inside the VM only: check what the guest provides (cgroup2, controllers, PSI, disk, bpffs).
    GuestCheck,
}

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(a) => run::run(a),
        Cmd::CargoTest(a) => cargo_test::run(a),
        Cmd::Prepare(a) => prepare::run(a),
        Cmd::Selftest(a) => selftest::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::GuestCheck => guest_check::run(),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("daros-vmtest: error: {e:#}");
            std::process::exit(daros_bpf_tests::vm::EXIT_NO_STATUS);
        }
    }
}
