//! `darosd`: the D-AROS node agent.

use std::process::ExitCode;

use clap::Parser;
use daros_agent::daemon::{self, args::DaemonArgs};

fn main() -> ExitCode {
    match daemon::run(DaemonArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("darosd: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
