//! Booting one VM for one job: job directory, IO test disk, QEMU, results.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::host::{self, HostError};
use super::job::{self, CommandResult, GuestCommand, JobError};
use super::kernel::{KernelCache, KernelError, KernelSource, PreparedKernel};
use super::monitor;
use super::qemu::{self, DiskCache, QemuConfig, QemuError, VmEnd};
use super::watch::{GuestWatch, Stuck};

/// How long a guest may take to reach its job by default. It boots in 3–10 s here
/// and took 48 s at worst with three VMs and two CPU hogs on this 2-core host; CI
/// saw a guest print nothing for 600 s (and benchmarks twice), so past this it is stuck.
pub const BOOT_WITHIN: Duration = Duration::from_secs(180);
/// How long a running job's guest may go without rewriting its heartbeat (every 5 s)
/// by default: a guest busy beyond that for minutes is hung (benchmarks twice saw QEMU
/// spin on both vCPUs with no output until the 40-minute timeout).
pub const HANG_AFTER: Duration = Duration::from_secs(180);
/// How long a stuck guest gets to print its panic after the NMI.
const NMI_GRACE: Duration = Duration::from_secs(20);
/// Boots tried before a stuck boot is the run's result.
const BOOT_ATTEMPTS: u32 = 2;

/// Exit code for a run that hit its timeout (as `timeout(1)`).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code for a run whose guest wrote no exit status (boot failure, panic, crash).
pub const EXIT_NO_STATUS: i32 = 125;

/// Why a VM run could not be carried out (as opposed to a program failing inside it).
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// The kernel could not be prepared.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A host tool is missing.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The job is malformed or its files could not be handled.
    #[error(transparent)]
    Job(#[from] JobError),
    /// QEMU could not be run.
    #[error(transparent)]
    Qemu(#[from] QemuError),
    /// A job directory file could not be created.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Formatting the IO test disk failed.
    #[error("mkfs.ext4 {path} failed: {stderr}")]
    Mkfs {
        /// The image.
        path: PathBuf,
        /// What mkfs said.
        stderr: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VmError + '_ {
    move |source| VmError::Io {
        path: path.to_owned(),
        source,
    }
}

const JOB_DIR_PREFIX: &str = "daros-vm-job-";
const OWNER_FILE: &str = "owner.pid";

/// Removes job directories under `parent` whose runner process is gone (it was killed,
/// e.g. by Ctrl-C, before it could clean up). Kept directories have no owner file.
pub fn sweep_stale_job_dirs(parent: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let is_job = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(JOB_DIR_PREFIX));
        let owner = std::fs::read_to_string(path.join(".vm").join(OWNER_FILE));
        let Some(pid) = owner.ok().and_then(|p| p.trim().parse::<u32>().ok()) else {
            continue;
        };
        if is_job
            && !Path::new(&format!("/proc/{pid}")).exists()
            && std::fs::remove_dir_all(&path).is_ok()
        {
            tracing::info!(dir = %path.display(), pid, "removed a job directory left by a killed run");
            removed += 1;
        }
    }
    removed
}

/// Size and limits of the VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmOptions {
    /// Guest memory in MiB (default 1024).
    pub memory_mib: u32,
    /// Guest vCPUs (default 2).
    pub cpus: u32,
    /// Whole-run limit, boot included (default 600 s); then QEMU is killed and the run is 124.
    pub timeout: Duration,
    /// How long the guest may take to reach its job before it counts as stuck and is
    /// booted again (default [`BOOT_WITHIN`]).
    pub boot_within: Duration,
    /// How long the running guest may go without a heartbeat before it counts as
    /// hung; the run then ends (default [`HANG_AFTER`]).
    pub hang_after: Duration,
    /// Size of the ext4 IO test disk in MiB, or `None` for no disk (default 256).
    pub disk_mib: Option<u32>,
    /// How the host caches that disk (default: its page cache, never flushed).
    pub disk_cache: DiskCache,
    /// Keep the job directory afterwards (default false).
    pub keep_job_dir: bool,
    /// Where job directories are created (default: the system temp dir).
    pub job_parent: Option<PathBuf>,
    /// Boot systemd as PID 1; the job runs as its service `daros-vmjob`
    /// (default false: the job runs chrooted, with no init).
    pub systemd: bool,
}

impl Default for VmOptions {
    fn default() -> Self {
        Self {
            memory_mib: 1024,
            cpus: 2,
            timeout: Duration::from_secs(600),
            boot_within: BOOT_WITHIN,
            hang_after: HANG_AFTER,
            disk_mib: Some(256),
            disk_cache: DiskCache::Unsafe,
            keep_job_dir: false,
            job_parent: None,
            systemd: false,
        }
    }
}

/// Everything a finished run produced.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// One result per command, in order.
    pub commands: Vec<CommandResult>,
    /// How QEMU ended.
    pub end: VmEnd,
    /// The serial console as the host saw it.
    pub console: Vec<u8>,
    /// QEMU's stderr.
    pub qemu_stderr: String,
    /// The guest kernel log, when the guest got far enough to save it.
    pub dmesg: Option<String>,
    /// Guest uptime when the job started.
    pub guest_boot: Option<Duration>,
    /// Host wall time of the whole run (every boot).
    pub wall: Duration,
    /// The job directory, when it was kept.
    pub job_dir: Option<PathBuf>,
    /// QEMU's process id (reaped by now).
    pub qemu_pid: u32,
    /// This boot's diagnosis if it was stuck (moved by [`Vm::run`]).
    stuck: Option<String>,
    /// The stuck boots before this one (or including it, if it is stuck too): what
    /// each guest's vCPUs were doing.
    pub stalled_boots: Vec<String>,
    /// When the guest hung while running its job: what its vCPUs were doing.
    pub hang: Option<String>,
}

impl RunReport {
    /// 124 on timeout; 125 if any command has no status; else the first non-zero status, or 0.
    pub fn exit_code(&self) -> i32 {
        if self.end == VmEnd::TimedOut {
            return EXIT_TIMEOUT;
        }
        if self.commands.iter().any(|c| c.status.is_none()) {
            return EXIT_NO_STATUS;
        }
        self.commands
            .iter()
            .filter_map(|c| c.status)
            .find(|&s| s != 0)
            .unwrap_or(0)
    }

    /// Why the run did not deliver every status, if it did not.
    pub fn vm_failure(&self) -> Option<String> {
        match self.end {
            VmEnd::TimedOut => Some(format!(
                "timed out after {:.1} s; qemu was killed",
                self.wall.as_secs_f64()
            )),
            VmEnd::Stuck(Stuck::Boot) => Some(format!(
                "the guest did not reach its job in {} boot(s); the last one's vCPUs: {}",
                self.stalled_boots.len(),
                self.stalled_boots.last().map_or("?", String::as_str)
            )),
            VmEnd::Stuck(Stuck::Hang) => Some(format!(
                "the guest stopped rewriting its heartbeat while running its job (hung); its vCPUs: {}",
                self.hang.as_deref().unwrap_or("?")
            )),
            VmEnd::Exited(status) if self.commands.iter().any(|c| c.status.is_none()) => {
                Some(format!(
                    "the guest wrote no exit status (qemu {status}{}); the guest kernel log follows",
                    if self.guest_boot.is_none() {
                        ", the job never started"
                    } else {
                        ""
                    }
                ))
            }
            VmEnd::Exited(_) => None,
        }
    }

    /// One line of timings: boot, programs, total.
    pub fn timings(&self) -> String {
        let programs: f64 = self
            .commands
            .iter()
            .filter_map(|c| c.elapsed)
            .map(|d| d.as_secs_f64())
            .sum();
        format!(
            "boot {} · programs {programs:.2} s · total {:.2} s",
            self.guest_boot
                .map_or("?".into(), |b| format!("{:.2} s", b.as_secs_f64())),
            self.wall.as_secs_f64()
        )
    }
}

/// A bootable VM: a prepared kernel plus host tools and options.
#[derive(Debug, Clone)]
pub struct Vm {
    kernel: PreparedKernel,
    qemu: PathBuf,
    mkfs: PathBuf,
    options: VmOptions,
}

impl Vm {
    /// Prepares (or reuses) the kernel in the default cache and checks the host tools.
    pub fn prepare(source: &KernelSource, options: VmOptions) -> Result<Self, VmError> {
        // Fail before a 70 MB download if QEMU is not there.
        host::require(host::RUN_TOOLS)?;
        let kernel = KernelCache::from_env().prepare(source)?;
        Self::with_kernel(kernel, options)
    }

    /// A VM for an already prepared kernel.
    pub fn with_kernel(kernel: PreparedKernel, options: VmOptions) -> Result<Self, VmError> {
        let mut tools = host::require(host::RUN_TOOLS)?.into_iter();
        let (Some(qemu), Some(mkfs)) = (tools.next(), tools.next()) else {
            return Err(HostError::Missing {
                missing: host::RUN_TOOLS.to_vec(),
            }
            .into());
        };
        Ok(Self {
            kernel,
            qemu,
            mkfs,
            options,
        })
    }

    /// The kernel it boots.
    pub fn kernel(&self) -> &PreparedKernel {
        &self.kernel
    }

    /// Its options.
    pub fn options(&self) -> &VmOptions {
        &self.options
    }

    /// Boots the VM, runs `commands` one after another inside it, streams the console to
    /// `console` and returns what happened. A program failing is not an error here:
    /// look at [`RunReport::exit_code`]. A guest that does not reach its job within
    /// [`VmOptions::boot_within`] is diagnosed, said so on `console`, and booted once more in
    /// what is left of the timeout; one that hangs later (no heartbeat for
    /// [`VmOptions::hang_after`]) is diagnosed and ends the run.
    pub fn run(
        &self,
        commands: &[GuestCommand],
        console: &mut dyn Write,
    ) -> Result<RunReport, VmError> {
        let start = Instant::now();
        let mut stalled = Vec::new();
        for attempt in 1.. {
            let left = self.options.timeout.saturating_sub(start.elapsed());
            let mut report = self.run_once(commands, console, left)?;
            match (report.end, report.stuck.take()) {
                (VmEnd::Stuck(Stuck::Boot), Some(s)) => stalled.push(s),
                (_, s) => report.hang = s,
            }
            let again = report.end == VmEnd::Stuck(Stuck::Boot)
                && attempt < BOOT_ATTEMPTS
                && self.options.timeout.saturating_sub(start.elapsed()) > self.options.boot_within;
            if again {
                let kept = report
                    .job_dir
                    .as_ref()
                    .map(|d| format!(" (its job directory is kept at {})", d.display()))
                    .unwrap_or_default();
                let note = format!(
                    "\ndaros-vmtest: the guest did not reach its job in {} s (boot {attempt} of {BOOT_ATTEMPTS}){kept}; \
                     its vCPUs:\n{}\ndaros-vmtest: booting it again\n",
                    self.options.boot_within.as_secs(),
                    stalled.last().map_or("?", String::as_str)
                );
                tracing::warn!(attempt, "guest boot stalled; booting again");
                let _ = console.write_all(note.as_bytes());
                continue;
            }
            report.stalled_boots = stalled;
            report.wall = start.elapsed();
            return Ok(report);
        }
        unreachable!("the loop returns")
    }

    fn run_once(
        &self,
        commands: &[GuestCommand],
        console: &mut dyn Write,
        timeout: Duration,
    ) -> Result<RunReport, VmError> {
        let parent = self
            .options
            .job_parent
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        sweep_stale_job_dirs(&parent);
        let dir = tempfile::Builder::new()
            .prefix(JOB_DIR_PREFIX)
            .tempdir_in(&parent)
            .map_err(io(&parent))?;
        let vm_dir = dir.path().join(".vm");
        std::fs::create_dir(&vm_dir).map_err(io(&vm_dir))?;
        let owner = vm_dir.join(OWNER_FILE);
        std::fs::write(&owner, std::process::id().to_string()).map_err(io(&owner))?;

        let script = job::script(commands, self.options.disk_mib.is_some())?;
        let script_path = vm_dir.join("job.sh");
        std::fs::write(&script_path, script).map_err(io(&script_path))?;
        // The guest powers itself off a little after the host would have killed it.
        let watchdog = timeout.as_secs() + 30;
        let conf = format!(
            "WATCHDOG_S={watchdog}\nDISK={}\nSYSTEMD={}\n",
            u8::from(self.options.disk_mib.is_some()),
            u8::from(self.options.systemd)
        );
        let conf_path = vm_dir.join("vm.conf");
        std::fs::write(&conf_path, conf).map_err(io(&conf_path))?;
        let disk = match self.options.disk_mib {
            Some(mib) => Some(self.make_disk(&vm_dir.join("disk.img"), mib)?),
            None => None,
        };

        let config = QemuConfig {
            qemu: self.qemu.clone(),
            vmlinux: self.kernel.vmlinux(),
            initramfs: self.kernel.initramfs(),
            job_dir: dir.path().to_owned(),
            disk,
            disk_cache: self.options.disk_cache,
            memory_mib: self.options.memory_mib,
            cpus: self.options.cpus,
            monitor: Some(vm_dir.join("monitor.sock")).filter(|m| monitor::fits(m)),
        };
        let watch = (timeout > self.options.boot_within).then(|| GuestWatch {
            marker: job::vm_file(dir.path(), "boot-uptime"),
            boot_within: self.options.boot_within,
            heartbeat: job::vm_file(dir.path(), job::HEARTBEAT),
            hang_after: self.options.hang_after,
            monitor: config.monitor.clone(),
            grace: NMI_GRACE,
        });
        tracing::debug!(job = %dir.path().display(), "starting qemu");
        let mut follower = job::OutputFollower::new(dir.path(), commands);
        let mut follow = |sink: &mut dyn Write| {
            if let Err(e) = follower.poll(sink) {
                tracing::warn!(error = %e, "cannot stream program output");
            }
        };
        let run = qemu::run(
            config.command(),
            timeout,
            watch.as_ref(),
            console,
            &mut follow,
        )?;

        let commands = job::read_results(dir.path(), commands)?;
        let dmesg = std::fs::read(vm_dir.join("dmesg"))
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let guest_boot = job::read_boot_time(dir.path());
        let job_dir = if self.options.keep_job_dir {
            // A kept directory has no owner, so no later sweep removes it.
            let _ = std::fs::remove_file(&owner);
            Some(dir.keep())
        } else {
            drop(dir);
            None
        };
        Ok(RunReport {
            commands,
            end: run.end,
            console: run.console,
            qemu_stderr: run.stderr,
            dmesg,
            guest_boot,
            wall: run.wall,
            job_dir,
            qemu_pid: run.pid,
            stuck: run.stuck,
            stalled_boots: Vec::new(),
            hang: None,
        })
    }

    fn make_disk(&self, path: &Path, mib: u32) -> Result<PathBuf, VmError> {
        let f = std::fs::File::create(path).map_err(io(path))?;
        f.set_len(u64::from(mib) << 20).map_err(io(path))?;
        drop(f);
        // Initialise inode tables and journal now: ext4lazyinit writing in the guest
        // would disturb IO measurements.
        let out = Command::new(&self.mkfs)
            .args([
                "-q",
                "-F",
                "-L",
                "daros-vmdisk",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
            ])
            .arg(path)
            .output()
            .map_err(io(&self.mkfs))?;
        if !out.status.success() {
            return Err(VmError::Mkfs {
                path: path.to_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(path.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn report(end: VmEnd, statuses: &[Option<i32>]) -> RunReport {
        RunReport {
            commands: statuses
                .iter()
                .map(|&status| CommandResult {
                    label: "x".into(),
                    status,
                    output: vec![],
                    elapsed: None,
                })
                .collect(),
            end,
            console: vec![],
            qemu_stderr: String::new(),
            dmesg: None,
            guest_boot: None,
            wall: Duration::from_secs(1),
            job_dir: None,
            qemu_pid: 0,
            stuck: None,
            stalled_boots: Vec::new(),
            hang: None,
        }
    }

    #[test]
    fn only_job_dirs_of_dead_runners_are_swept() {
        let parent = tempfile::tempdir().unwrap();
        let make = |name: &str, owner: Option<&str>| {
            let d = parent.path().join(name);
            std::fs::create_dir_all(d.join(".vm")).unwrap();
            if let Some(o) = owner {
                std::fs::write(d.join(".vm").join(OWNER_FILE), o).unwrap();
            }
            d
        };
        // A pid that cannot exist (above pid_max's hard limit of 2^22).
        let dead = make("daros-vm-job-dead", Some("4194305"));
        let alive = make("daros-vm-job-alive", Some(&std::process::id().to_string()));
        let kept = make("daros-vm-job-kept", None);
        let other = make("someone-else", Some("4194305"));
        assert_eq!(sweep_stale_job_dirs(parent.path()), 1);
        assert!(!dead.exists());
        assert!(alive.exists() && kept.exists() && other.exists());
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        let ok = VmEnd::Exited(ExitStatus::from_raw(0));
        assert_eq!(report(ok, &[Some(0)]).exit_code(), 0);
        assert_eq!(report(ok, &[Some(0), Some(101), Some(3)]).exit_code(), 101);
        assert_eq!(report(ok, &[Some(0), None]).exit_code(), EXIT_NO_STATUS);
        assert_eq!(
            report(VmEnd::TimedOut, &[Some(0), None]).exit_code(),
            EXIT_TIMEOUT
        );
        assert!(report(ok, &[Some(1)]).vm_failure().is_none());
        assert!(
            report(ok, &[None])
                .vm_failure()
                .unwrap()
                .contains("never started")
        );
    }
}
