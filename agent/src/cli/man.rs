//! `darosctl man`: man pages generated from the same clap definitions.

use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;

use super::{Cli, CliError};
use crate::daemon::args::DaemonArgs;

/// Arguments of `darosctl man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write darosctl.1, one page per subcommand and darosd.8 into this directory
    /// instead of printing darosctl.1.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Prints or writes the pages.
pub fn run(a: ManArgs, out: &mut impl Write) -> Result<(), CliError> {
    let io = |e: std::io::Error| CliError::Other(format!("writing man page: {e}"));
    match a.out_dir {
        None => {
            clap_mangen::Man::new(Cli::command())
                .render(out)
                .map_err(io)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(io)?;
            clap_mangen::generate_to(Cli::command(), &dir).map_err(io)?;
            let daemon = DaemonArgs::command();
            let mut buf = Vec::new();
            clap_mangen::Man::new(daemon)
                .section("8")
                .render(&mut buf)
                .map_err(io)?;
            std::fs::write(dir.join("darosd.8"), buf).map_err(io)?;
            writeln!(out, "wrote man pages to {}", dir.display()).map_err(io)?;
        }
    }
    Ok(())
}
