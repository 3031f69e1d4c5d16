//! The QEMU process: its command line (the measured recipe: TCG, q35, 9p shares,
//! virtio-blk) and a supervisor that streams the serial console, enforces the timeout
//! and never leaves QEMU running.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::monitor;
use super::watch::{GuestWatch, Stuck, Watcher};

/// Kernel command line. `psi=1` keeps PSI on should a kernel build default it off;
/// `cgroup_no_v1=all` makes cgroup2 the only cgroup hierarchy the guest can mount.
/// A soft lockup panics the guest at once (instead of the job hanging until the
/// timeout) after backtracing every CPU, and the panic replays the whole kernel
/// log on the console (`panic_print=0x20`), whose level otherwise hides the stacks,
/// and every CPU's backtrace (`0x40`). An NMI the kernel does not expect panics it
/// (`unknown_nmi_panic`): the runner sends one to a guest that never reached its job.
pub const KERNEL_CMDLINE: &str = "console=ttyS0 rdinit=/init quiet loglevel=1 panic=-1 reboot=t oops=panic \
     mitigations=off tsc=reliable psi=1 cgroup_no_v1=all \
     softlockup_panic=1 softlockup_all_cpu_backtrace=1 unknown_nmi_panic panic_print=0x60";

/// The kernel command line with `extra` (`DAROS_VM_KERNEL_ARGS`, e.g.
/// `loglevel=7 softlockup_panic=1` to see a hang's stack on the console) appended:
/// a later parameter wins.
pub fn kernel_cmdline(extra: Option<&str>) -> String {
    match extra.map(str::trim).filter(|e| !e.is_empty()) {
        Some(e) => format!("{KERNEL_CMDLINE} {e}"),
        None => KERNEL_CMDLINE.to_string(),
    }
}

const POLL_EVERY: Duration = Duration::from_millis(50);

/// At most this much console output is kept in memory (the rest is still streamed).
pub const CONSOLE_KEEP_BYTES: usize = 16 << 20;

/// Why QEMU could not be run.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    /// QEMU could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The QEMU binary.
        program: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Waiting for or killing QEMU failed.
    #[error("supervising qemu: {0}")]
    Wait(std::io::Error),
}

/// What the VM looks like.
#[derive(Debug, Clone)]
pub struct QemuConfig {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// ELF kernel.
    pub vmlinux: PathBuf,
    /// Initramfs.
    pub initramfs: PathBuf,
    /// Shared read-write as `job`.
    pub job_dir: PathBuf,
    /// Raw image attached as virtio-blk, if any.
    pub disk: Option<PathBuf>,
    /// How the host caches that image.
    pub disk_cache: DiskCache,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Guest vCPUs.
    pub cpus: u32,
    /// QEMU's human monitor on this unix socket, if any.
    pub monitor: Option<PathBuf>,
}

/// How QEMU backs the guest's disk on the host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DiskCache {
    /// The host's page cache, never flushed (`cache=unsafe`): fast, and what the
    /// guest measures is mostly the host's memory.
    #[default]
    Unsafe,
    /// `O_DIRECT` on the image (`cache=none`): the guest's reads and writes reach
    /// the host's disk, with its latency and bandwidth (for IO control that
    /// needs a device to model, e.g. iocost).
    Direct,
}

impl DiskCache {
    fn qemu_option(self) -> &'static str {
        match self {
            DiskCache::Unsafe => "cache=unsafe",
            DiskCache::Direct => "cache=none,aio=threads",
        }
    }
}

impl QemuConfig {
    /// The QEMU command line.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.qemu);
        c.args([
            "-nodefaults",
            "-M",
            "q35",
            "-accel",
            "tcg,thread=multi",
            "-cpu",
            "max",
        ])
        .args([
            "-smp",
            &self.cpus.to_string(),
            "-m",
            &format!("{}M", self.memory_mib),
        ])
        .args(["-display", "none", "-no-reboot", "-no-user-config"])
        .args([
            "-chardev",
            "stdio,id=con,signal=on",
            "-serial",
            "chardev:con",
        ])
        .arg("-kernel")
        .arg(&self.vmlinux)
        .arg("-initrd")
        .arg(&self.initramfs)
        .arg("-append")
        .arg(kernel_cmdline(
            std::env::var("DAROS_VM_KERNEL_ARGS").ok().as_deref(),
        ))
        .args([
            "-fsdev",
            "local,id=r,path=/,readonly=on,security_model=none,multidevs=remap",
        ])
        .args(["-device", "virtio-9p-pci,fsdev=r,mount_tag=hostroot"])
        .arg("-fsdev")
        .arg(fsdev_arg("j", &self.job_dir))
        .args(["-device", "virtio-9p-pci,fsdev=j,mount_tag=job"]);
        if let Some(disk) = &self.disk {
            let mut d = std::ffi::OsString::from("file=");
            d.push(escape_commas(disk));
            d.push(",if=none,id=d0,format=raw,");
            d.push(self.disk_cache.qemu_option());
            c.arg("-drive")
                .arg(d)
                .args(["-device", "virtio-blk-pci,drive=d0"]);
        }
        if let Some(m) = &self.monitor {
            c.arg("-monitor").arg(monitor::qemu_arg(m));
        }
        c
    }
}

/// QEMU option values escape a literal comma by doubling it.
fn escape_commas(p: &Path) -> std::ffi::OsString {
    p.as_os_str().to_string_lossy().replace(',', ",,").into()
}

fn fsdev_arg(id: &str, path: &Path) -> std::ffi::OsString {
    let mut a = std::ffi::OsString::from(format!("local,id={id},path="));
    a.push(escape_commas(path));
    a.push(",security_model=none,multidevs=remap");
    a
}

/// How the QEMU process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmEnd {
    /// QEMU exited by itself (the guest powered off, rebooted or panicked).
    Exited(ExitStatus),
    /// The timeout passed and QEMU was killed.
    TimedOut,
    /// The guest was stuck (see [`GuestWatch`]): it was sent an NMI (to print its
    /// log) and QEMU was then killed if it had not exited.
    Stuck(Stuck),
}

/// A finished QEMU run.
#[derive(Debug, Clone)]
pub struct QemuRun {
    /// How it ended.
    pub end: VmEnd,
    /// The serial console (at most [`CONSOLE_KEEP_BYTES`], the latest part).
    pub console: Vec<u8>,
    /// QEMU's own stderr.
    pub stderr: String,
    /// Wall time from start to exit.
    pub wall: Duration,
    /// QEMU's process id (gone by now).
    pub pid: u32,
    /// When the guest was stuck: its vCPUs' state and what was done about it.
    pub stuck: Option<String>,
}

/// Kills and reaps QEMU whatever happens to the supervisor (error, panic, unwind).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and only makes the
    // async-signal-safe prctl(PR_SET_PDEATHSIG) system call.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
}

/// Runs QEMU to completion or `timeout`, copying the console to `sink` as it arrives
/// and calling `poll` with the sink about every 50 ms and once at the end (the runner
/// streams the programs' output files from there). With `watch`, a stuck guest is
/// diagnosed and ends the run as [`VmEnd::Stuck`].
///
/// QEMU gets SIGKILL if this thread's process dies (`PR_SET_PDEATHSIG`), on timeout,
/// and when this function returns early for any reason.
pub fn run(
    mut cmd: Command,
    timeout: Duration,
    watch: Option<&GuestWatch>,
    sink: &mut dyn Write,
    poll: &mut dyn FnMut(&mut dyn Write),
) -> Result<QemuRun, QemuError> {
    let program = PathBuf::from(cmd.get_program());
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    let start = Instant::now();
    let mut child = KillOnDrop(
        cmd.spawn()
            .map_err(|source| QemuError::Spawn { program, source })?,
    );
    let pid = child.0.id();

    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let stdout = child.0.stdout.take();
    let reader = std::thread::spawn(move || {
        let Some(mut out) = stdout else { return };
        let mut buf = vec![0u8; 16 << 10];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let stderr = child.0.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut s);
        }
        s
    });

    let mut console = Vec::new();
    let mut keep = |chunk: &[u8], sink: &mut dyn Write| {
        let _ = sink.write_all(chunk);
        let _ = sink.flush();
        console.extend_from_slice(chunk);
        if console.len() > CONSOLE_KEEP_BYTES {
            console.drain(..console.len() - CONSOLE_KEEP_BYTES);
        }
    };
    let mut deadline = start + timeout;
    let mut watcher = watch.map(Watcher::new);
    let mut stuck = None;
    let mut open = true;
    let mut polled = Instant::now();
    let end = loop {
        if polled.elapsed() >= POLL_EVERY {
            poll(sink);
            polled = Instant::now();
        }
        if open {
            match rx.recv_timeout(POLL_EVERY) {
                Ok(chunk) => keep(&chunk, sink),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => open = false,
            }
        } else {
            // stdout closed: QEMU is exiting; poll for its status (still under the deadline).
            std::thread::sleep(Duration::from_millis(20));
        }
        let ended = |end| stuck.as_ref().map_or(end, |(s, _)| VmEnd::Stuck(*s));
        if let Some(status) = child.0.try_wait().map_err(QemuError::Wait)? {
            break ended(VmEnd::Exited(status));
        }
        if Instant::now() >= deadline {
            child.0.kill().map_err(QemuError::Wait)?;
            child.0.wait().map_err(QemuError::Wait)?;
            break ended(VmEnd::TimedOut);
        }
        if let (Some(w), Some(s)) = (watch, watcher.as_mut().and_then(Watcher::poll)) {
            stuck = Some((s, w.diagnose()));
            deadline = deadline.min(Instant::now() + w.grace);
        }
    };
    let wall = start.elapsed();
    // QEMU is gone, so the pipe is at EOF: drain what is left.
    let _ = reader.join();
    for chunk in rx.try_iter() {
        keep(&chunk, sink);
    }
    poll(sink);
    let stderr = err_reader.join().unwrap_or_default();
    Ok(QemuRun {
        end,
        console,
        stderr,
        wall,
        pid,
        stuck: stuck.map(|(_, d)| d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> QemuConfig {
        QemuConfig {
            qemu: "qemu-system-x86_64".into(),
            vmlinux: "/k/vmlinux".into(),
            initramfs: "/k/initramfs.cpio".into(),
            job_dir: "/tmp/job,1".into(),
            disk: Some("/tmp/job,1/.vm/disk.img".into()),
            disk_cache: DiskCache::Unsafe,
            memory_mib: 512,
            cpus: 3,
            monitor: Some("/tmp/job,1/.vm/monitor.sock".into()),
        }
    }

    #[test]
    fn command_follows_the_recipe() {
        let cmd = config().command();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        for want in [
            "-M q35",
            "-accel tcg,thread=multi",
            "-cpu max",
            "-smp 3",
            "-m 512M",
            "-no-reboot",
            "mount_tag=hostroot",
            "path=/,readonly=on",
            "path=/tmp/job,,1,security_model=none",
            "file=/tmp/job,,1/.vm/disk.img,if=none",
            "virtio-blk-pci,drive=d0",
            "-monitor unix:/tmp/job,,1/.vm/monitor.sock,server=on,wait=off",
        ] {
            assert!(line.contains(want), "missing {want:?} in {line}");
        }
        assert!(!line.contains("kvm"), "no KVM path: {line}");
        assert!(line.contains("format=raw,cache=unsafe"), "{line}");
    }

    #[test]
    fn a_direct_disk_bypasses_the_host_page_cache() {
        let mut c = config();
        c.disk_cache = DiskCache::Direct;
        let line: Vec<String> = c
            .command()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = line.join(" ");
        assert!(line.contains("format=raw,cache=none,aio=threads"), "{line}");
    }

    #[test]
    fn extra_kernel_arguments_come_after_the_recipe() {
        assert_eq!(kernel_cmdline(None), KERNEL_CMDLINE);
        assert_eq!(kernel_cmdline(Some("  ")), KERNEL_CMDLINE);
        let line = kernel_cmdline(Some("loglevel=7"));
        assert!(
            line.starts_with(KERNEL_CMDLINE) && line.ends_with(" loglevel=7"),
            "{line}"
        );
    }

    #[test]
    fn a_process_that_outlives_the_timeout_is_killed_and_reaped() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "echo started; exec sleep 600"]);
        let mut sink = Vec::new();
        let t0 = Instant::now();
        let run = run(
            cmd,
            Duration::from_millis(600),
            None,
            &mut sink,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(run.end, VmEnd::TimedOut);
        assert!(t0.elapsed() < Duration::from_secs(10));
        assert_eq!(sink, b"started\n");
        assert_eq!(run.console, b"started\n");
        assert!(
            !Path::new(&format!("/proc/{}", run.pid)).exists(),
            "child still exists"
        );
    }

    /// A watch that wants the boot marker in 0.3 s and gives 0.3 s after the NMI.
    fn quick_watch(dir: &Path) -> GuestWatch {
        GuestWatch {
            marker: dir.join("boot-uptime"),
            boot_within: Duration::from_millis(300),
            heartbeat: dir.join("heartbeat"),
            hang_after: Duration::from_secs(60),
            monitor: None,
            grace: Duration::from_millis(300),
        }
    }

    fn run_watched(cmd: Command, timeout: Duration, watch: &GuestWatch) -> QemuRun {
        run(cmd, timeout, Some(watch), &mut std::io::sink(), &mut |_| {}).unwrap()
    }

    #[test]
    fn a_guest_that_never_writes_its_marker_is_stuck_then_killed() {
        let dir = tempfile::tempdir().unwrap();
        let watch = quick_watch(dir.path());
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "echo booting; exec sleep 600"]);
        let t0 = Instant::now();
        let run = run_watched(cmd, Duration::from_secs(60), &watch);
        assert_eq!(run.end, VmEnd::Stuck(Stuck::Boot));
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(run.stuck.unwrap().contains("no monitor socket"));
        assert!(!Path::new(&format!("/proc/{}", run.pid)).exists());
    }

    #[test]
    fn a_guest_that_wrote_its_marker_runs_on_past_the_boot_limit() {
        let dir = tempfile::tempdir().unwrap();
        let watch = quick_watch(dir.path());
        let marker = watch.marker.clone();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(format!("touch {}; sleep 1; exit 0", marker.display()));
        let run = run_watched(cmd, Duration::from_secs(30), &watch);
        assert!(
            matches!(run.end, VmEnd::Exited(s) if s.success()),
            "{:?}",
            run.end
        );
        assert_eq!(run.stuck, None);
    }

    #[test]
    fn exit_status_and_stderr_come_back() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let mut polls = 0;
        let run = run(
            cmd,
            Duration::from_secs(30),
            None,
            &mut std::io::sink(),
            &mut |_| polls += 1,
        )
        .unwrap();
        assert!(polls >= 1, "the final poll always happens");
        assert!(matches!(run.end, VmEnd::Exited(s) if s.code() == Some(3)));
        assert_eq!(run.console, b"out\n");
        assert_eq!(run.stderr, "err\n");
    }

    #[test]
    fn a_missing_binary_is_a_clear_error() {
        let err = run(
            Command::new("/daros-test-no-such-qemu"),
            Duration::from_secs(1),
            None,
            &mut std::io::sink(),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("/daros-test-no-such-qemu"),
            "{err}"
        );
    }
}
