//! `darosctl completions <shell>`.

use std::io::Write;

use clap::CommandFactory;

use super::{Cli, CliError};

/// Arguments of `darosctl completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// Shell to generate for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the completion script.
pub fn run(a: CompletionsArgs, out: &mut impl Write) -> Result<(), CliError> {
    clap_complete::generate(a.shell, &mut Cli::command(), "darosctl", out);
    Ok(())
}
