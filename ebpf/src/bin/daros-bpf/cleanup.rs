//! `daros-bpf cleanup`: the documented way to remove the datapath from a host.

use std::path::PathBuf;

use daros_ebpf::PinDir;

#[derive(clap::Args)]
pub struct Args {
    /// Pin directory to remove (no default: the production directory,
    /// `/sys/fs/bpf/daros`, is named when meant).
    #[arg(long)]
    pin_dir: PathBuf,
    /// Remove even while a running owner holds the lock.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let removed = daros_ebpf::cleanup(&PinDir::new(&args.pin_dir), args.force)?;
    println!("removed {removed} pins under {}", args.pin_dir.display());
    Ok(())
}
