//! `daros-vmtest prepare`: fetch and cache the kernel, build the initramfs.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use daros_bpf_tests::vm::{KernelCache, KernelSource, host};

use crate::vm_args::Format;

#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// Run `apt-get update` and fetch whatever kernel `linux-image-amd64` now depends on.
    #[arg(long, conflicts_with_all = ["package", "deb"])]
    pub refresh: bool,
    /// Use this kernel package instead (e.g. linux-image-6.1.0-56-amd64).
    #[arg(long, conflicts_with = "deb")]
    pub package: Option<String>,
    /// Use this kernel .deb (offline; also DAROS_VM_KERNEL_DEB).
    #[arg(long, value_name = "FILE")]
    pub deb: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub fn run(args: PrepareArgs) -> anyhow::Result<i32> {
    host::require(host::RUN_TOOLS)?;
    let source = match (args.refresh, args.package, args.deb) {
        (true, _, _) => KernelSource::Refresh,
        (_, Some(p), _) => KernelSource::Package(p),
        (_, _, Some(d)) => KernelSource::Deb(d),
        _ => KernelSource::from_env(),
    };
    let cache = KernelCache::from_env();
    let t0 = std::time::Instant::now();
    let k = cache
        .prepare(&source)
        .context("preparing the guest kernel")?;
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "package": k.package, "version": k.version, "release": k.release,
                "modules": k.modules, "disk_modules": k.disk_modules, "vmlinux": k.vmlinux(), "initramfs": k.initramfs(),
                "cache": cache.root(), "seconds": t0.elapsed().as_secs_f64(),
            })
        ),
        Format::Text => {
            println!(
                "kernel    {} {} (release {})",
                k.package, k.version, k.release
            );
            println!("vmlinux   {}", k.vmlinux().display());
            println!("initramfs {}", k.initramfs().display());
            println!(
                "modules   {} | disk: {}",
                k.modules.join(" "),
                k.disk_modules.join(" ")
            );
            println!("prepared in {:.1} s", t0.elapsed().as_secs_f64());
        }
    }
    Ok(0)
}
