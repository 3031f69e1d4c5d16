//! Options shared by the subcommands that boot the VM.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use daros_bpf_tests::vm::{DiskCache, GuestCommand, KernelSource, Vm, VmOptions};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Console on stdout, summary on stderr.
    Text,
    /// Console on stderr, a JSON report on stdout.
    Json,
}

/// Variables passed from the host environment by default (plus every `DAROS_*`).
const PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "RUST_BACKTRACE",
    "RUST_LOG",
    "RUST_MIN_STACK",
];

#[derive(Debug, Args)]
pub struct VmArgs {
    /// Whole-run limit in seconds, boot included; then the VM is killed and the exit code is 124.
    #[arg(long, default_value_t = 600, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub timeout: u64,
    /// A guest that has not reached its job in this many seconds is stuck: its
    /// vCPUs are read, it gets an NMI (its kernel log follows on the console) and it
    /// is booted once more within the timeout.
    #[arg(long, default_value_t = 180, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub boot_within: u64,
    /// A running job's guest that has not rewritten its heartbeat (every 5 s) in
    /// this many seconds is hung: its vCPUs are read, it gets an NMI and the run ends.
    #[arg(long, default_value_t = 180, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(10..=86400))]
    pub hang_after: u64,
    /// Guest memory, e.g. 1G, 512M (MiB if no suffix).
    #[arg(long, default_value = "1G", value_parser = parse_mem, value_name = "SIZE")]
    pub mem: u32,
    /// Guest vCPUs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// Size of the ext4 IO test disk (/dev/vda on /mnt/vmdisk) in MiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(16..=65536))]
    pub disk_mib: u32,
    /// Attach no IO test disk.
    #[arg(long)]
    pub no_disk: bool,
    /// How the host backs the IO test disk: `unsafe` (its page cache) or `direct`
    /// (O_DIRECT: the host's own disk, its latency and bandwidth).
    #[arg(long, value_enum, default_value_t = DiskCache::Unsafe)]
    pub disk_cache: DiskCache,
    /// Keep the job directory (outputs, statuses, dmesg, disk image) and print its path.
    #[arg(long)]
    pub keep: bool,
    /// Boot systemd as PID 1 and run the job as a service under it (units,
    /// transient units, `systemd-analyze` of running services work).
    #[arg(long)]
    pub systemd: bool,
    /// Set a variable in the guest program's environment (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_kv)]
    pub env: Vec<(OsString, OsString)>,
    /// Pass a host variable through (repeatable; PATH, HOME, RUST_LOG, DAROS_* ... are by default).
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<OsString>,
    /// Use this kernel .deb instead of the cached or downloaded one (also DAROS_VM_KERNEL_DEB).
    #[arg(long, value_name = "FILE")]
    pub kernel_deb: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// No summary line on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

fn parse_mem(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'G' | 'g')) => (&s[..i], 1024),
        Some((i, 'M' | 'm')) => (&s[..i], 1),
        _ => (s, 1),
    };
    let n: u32 = num
        .parse()
        .map_err(|_| format!("memory size {s:?}: expected e.g. 1G, 512M or 768"))?;
    let mib = n
        .checked_mul(mult)
        .ok_or_else(|| format!("memory size {s:?} is too large"))?;
    if !(128..=65536).contains(&mib) {
        return Err(format!("memory size {s:?}: must be between 128M and 64G"));
    }
    Ok(mib)
}

fn parse_kv(s: &str) -> Result<(OsString, OsString), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!(
            "--env {s:?}: expected KEY=VALUE with a non-empty KEY"
        )),
    }
}

impl VmArgs {
    /// Prepares the kernel and returns the VM.
    pub fn vm(&self) -> anyhow::Result<Vm> {
        let source = match &self.kernel_deb {
            Some(deb) => KernelSource::Deb(deb.clone()),
            None => KernelSource::from_env(),
        };
        let options = VmOptions {
            memory_mib: self.mem,
            cpus: self.cpus,
            timeout: Duration::from_secs(self.timeout),
            boot_within: Duration::from_secs(self.boot_within),
            hang_after: Duration::from_secs(self.hang_after),
            disk_mib: (!self.no_disk).then_some(self.disk_mib),
            disk_cache: self.disk_cache,
            keep_job_dir: self.keep,
            job_parent: None,
            systemd: self.systemd,
        };
        Vm::prepare(&source, options).context("preparing the VM")
    }

    /// Applies the environment: the pass-through set, then `--pass-env`, then `--env`.
    pub fn apply_env(&self, mut cmd: GuestCommand) -> anyhow::Result<GuestCommand> {
        cmd.env.clear();
        cmd = cmd.env("TERM", "dumb");
        for (k, v) in std::env::vars_os() {
            let name = k.to_string_lossy();
            if PASS_ENV.contains(&name.as_ref())
                || (name.starts_with("DAROS_") && !name.starts_with("DAROS_VM_"))
            {
                cmd = cmd.env(k, v);
            }
        }
        for name in &self.pass_env {
            match std::env::var_os(name) {
                Some(v) => cmd = cmd.env(name.clone(), v),
                None => bail!("--pass-env {}: not set on the host", name.to_string_lossy()),
            }
        }
        for (k, v) in &self.env {
            cmd = cmd.env(k.clone(), v.clone());
        }
        if !cmd.env.iter().any(|(k, _)| k == "PATH") {
            cmd = cmd.env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            );
        }
        Ok(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_mem("1G"), Ok(1024));
        assert_eq!(parse_mem("512M"), Ok(512));
        assert_eq!(parse_mem("768"), Ok(768));
        assert!(parse_mem("12").unwrap_err().contains("between"));
        assert!(parse_mem("lots").unwrap_err().contains("expected"));
        assert!(parse_mem("9999999G").is_err());
    }

    #[test]
    fn env_pairs() {
        assert_eq!(parse_kv("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_kv("=x").is_err());
        assert!(parse_kv("novalue").is_err());
    }
}
