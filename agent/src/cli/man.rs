//! `darosctl man`: man pages generated from the same clap definitions.

use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;

use super::{Cli, CliError};
use crate::daemon::args::DaemonArgs;

/// Arguments of `darosctl man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write man1/darosctl.1 (one page per subcommand too) and man8/darosd.8 under
    /// this directory instead of printing darosctl.1.
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
            // The conventional layout, installable as is under /usr/share/man.
            let man1 = dir.join("man1");
            let man8 = dir.join("man8");
            std::fs::create_dir_all(&man1).map_err(io)?;
            std::fs::create_dir_all(&man8).map_err(io)?;
            clap_mangen::generate_to(Cli::command(), &man1).map_err(io)?;
            let mut buf = Vec::new();
            clap_mangen::Man::new(DaemonArgs::command())
                .section("8")
                .render(&mut buf)
                .map_err(io)?;
            std::fs::write(man8.join("darosd.8"), buf).map_err(io)?;
            writeln!(
                out,
                "wrote man pages to {}/man1 and {}/man8",
                dir.display(),
                dir.display()
            )
            .map_err(io)?;
        }
    }
    Ok(())
}
