//! `darosctl`: command line for the local D-AROS agent.

use std::process::ExitCode;

use clap::Parser;
use daros_agent::cli::{self, Cli};

fn main() -> ExitCode {
    match cli::run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("darosctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
