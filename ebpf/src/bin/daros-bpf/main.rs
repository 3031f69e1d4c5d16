//! `daros-bpf`: the D-AROS eBPF datapath on its own, until darosd embeds it.
//!
//! - `run --config FILE`: load or reopen the pinned datapath, attach, apply caps, run the floor
//!   loop and the event reader until SIGTERM/SIGINT. Programs and maps stay pinned when it
//!   exits or dies: counting and caps go on, the next `run` picks them up.
//! - `stats`: counters, caps and scheduler statistics, read from the pins.
//! - `cleanup --pin-dir DIR`: removes everything under the pin directory.
//! - `loadgen send|recv`: a TCP traffic generator to check accounting and caps.

mod cleanup;
mod config;
mod loadgen;
mod run;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "daros-bpf",
    version,
    about = "D-AROS eBPF datapath: network accounting, caps and floors, run-queue latency"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log filter (tracing-subscriber env-filter syntax); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    log: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load or reopen the datapath and keep it configured until stopped.
    Run(run::Args),
    /// Print counters, caps and scheduler statistics from the pins.
    Stats(stats::Args),
    /// Remove every pin (detaches all programs, frees all maps).
    Cleanup(cleanup::Args),
    /// TCP traffic generator for checking accounting and caps.
    #[command(subcommand)]
    Loadgen(loadgen::Cmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.cmd {
        Cmd::Run(args) => run::run(args),
        Cmd::Stats(args) => stats::run(args),
        Cmd::Cleanup(args) => cleanup::run(args),
        Cmd::Loadgen(cmd) => loadgen::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("daros-bpf: {e:#}");
            ExitCode::FAILURE
        }
    }
}
