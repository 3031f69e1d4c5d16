//! A job: the programs to run in one VM, written into the job directory the guest
//! mounts at [`GUEST_JOB_DIR`], and the results the guest writes back there.
//!
//! The runner's own files live in `<job>/.vm/`: `vm.conf` (sourced by the guest init),
//! `job.sh` (the generated script), `disk.img`, `owner.pid`, and from the guest
//! `boot-uptime`, `heartbeat`, `output.N`, `status.N`, `time.N` (written last), `dmesg`. The rest of the job directory is free for
//! the programs (`$DAROS_VM_JOB_DIR`), e.g. to hand files back with `--keep`.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file in `.vm/` the guest's job rewrites (with its uptime) every
/// [`HEARTBEAT_EVERY`] while it runs.
pub const HEARTBEAT: &str = "heartbeat";
/// How often the guest writes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Where the guest mounts the job directory.
pub const GUEST_JOB_DIR: &str = "/run/daros-job";
/// The IO test block device in the guest.
pub const GUEST_DISK_DEV: &str = "/dev/vda";
/// Where the guest mounts the IO test disk (ext4).
pub const GUEST_DISK_MOUNT: &str = "/mnt/vmdisk";
/// Set to `1` for every program run in the guest.
pub const ENV_IN_VM: &str = "DAROS_IN_VM";
/// The job directory as the guest sees it.
pub const ENV_JOB_DIR: &str = "DAROS_VM_JOB_DIR";
/// The IO test block device (`/dev/vda`).
pub const ENV_DISK_DEV: &str = "DAROS_VM_DISK_DEV";
/// `MAJ:MIN` of the IO test block device, for `io.max` and `io.weight`.
pub const ENV_DISK_MAJMIN: &str = "DAROS_VM_DISK_MAJMIN";
/// Mount point of the IO test disk.
pub const ENV_DISK_MOUNT: &str = "DAROS_VM_DISK_MOUNT";
/// Exit status a program gets when its working directory does not exist in the guest.
pub const EXIT_NO_CWD: i32 = 126;

/// Why a job could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A job file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A command is malformed.
    #[error("command {index} ({label}): {reason}")]
    BadCommand {
        /// Position in the job.
        index: usize,
        /// Its label.
        label: String,
        /// What is wrong.
        reason: String,
    },
}

/// One program to run in the guest, as root, with exactly the given environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCommand {
    /// Shown in headers and summaries.
    pub label: String,
    /// Program path or name (looked up in the given `PATH`).
    pub program: OsString,
    /// Arguments.
    pub args: Vec<OsString>,
    /// Working directory (a host path: the host root is the guest's root).
    pub cwd: PathBuf,
    /// The complete environment, besides the `DAROS_*` variables the runner adds.
    pub env: Vec<(OsString, OsString)>,
}

impl GuestCommand {
    /// `program` with no arguments, in `/`, with `PATH` only.
    pub fn new(program: impl Into<OsString>) -> Self {
        let program = program.into();
        Self {
            label: program.to_string_lossy().into_owned(),
            program,
            args: Vec::new(),
            cwd: PathBuf::from("/"),
            env: vec![(
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            )],
        }
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = dir.into();
        self
    }

    /// Sets (or replaces) one environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        let key = key.into();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }

    /// Sets the label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandResult {
    /// The command's label.
    pub label: String,
    /// Exit status as the guest shell saw it (128+N for signal N); `None` if the guest
    /// never wrote one (the VM died or timed out first).
    pub status: Option<i32>,
    /// Its stdout and stderr, interleaved as written.
    pub output: Vec<u8>,
    /// Guest time it took, when it finished.
    pub elapsed: Option<Duration>,
}

/// Single-quotes `s` for a POSIX shell.
fn quote(out: &mut Vec<u8>, s: &OsStr) {
    out.push(b'\'');
    for &b in s.as_bytes() {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
}

fn validate(index: usize, c: &GuestCommand) -> Result<(), JobError> {
    let bad = |reason: String| JobError::BadCommand {
        index,
        label: c.label.clone(),
        reason,
    };
    if c.program.is_empty() {
        return Err(bad("empty program".into()));
    }
    if !c.cwd.is_absolute() {
        return Err(bad(format!(
            "working directory {} is not absolute",
            c.cwd.display()
        )));
    }
    let nul = |s: &OsStr| s.as_bytes().contains(&0);
    if nul(&c.program) || c.args.iter().any(|a| nul(a)) || nul(c.cwd.as_os_str()) {
        return Err(bad(
            "NUL byte in program, argument or working directory".into()
        ));
    }
    for (k, v) in &c.env {
        let kb = k.as_bytes();
        if kb.is_empty() || kb.contains(&b'=') || nul(k) || nul(v) {
            return Err(bad(format!(
                "environment variable name {:?} must be non-empty without '=' or NUL, and its value without NUL",
                k
            )));
        }
    }
    Ok(())
}

/// Generates the guest script that runs `commands` one after another.
pub fn script(commands: &[GuestCommand], disk: bool) -> Result<Vec<u8>, JobError> {
    let mut s = Vec::new();
    s.extend_from_slice(b"# generated by daros-vmtest; runs in the guest chroot\n");
    s.extend_from_slice(format!("J={GUEST_JOB_DIR}/.vm\n").as_bytes());
    // The host reads this every few seconds: a guest that stops changing it is hung.
    s.extend_from_slice(
        format!(
            "( while :; do cat /proc/uptime > $J/{HEARTBEAT}; sleep {}; done ) </dev/null >/dev/null 2>&1 &\n\
             HEARTBEAT_PID=$!\n",
            HEARTBEAT_EVERY.as_secs()
        )
        .as_bytes(),
    );
    if disk {
        s.extend_from_slice(b"DISK_MAJMIN=$(cat /sys/block/vda/dev 2>/dev/null)\n");
    }
    for (i, c) in commands.iter().enumerate() {
        validate(i, c)?;
        s.extend_from_slice(b"read -r t0 _ < /proc/uptime\n( cd ");
        quote(&mut s, c.cwd.as_os_str());
        s.extend_from_slice(b" 2>/dev/null || { echo ");
        let msg = format!(
            "daros-vmtest: working directory {} does not exist in the guest",
            c.cwd.display()
        );
        quote(&mut s, OsStr::new(&msg));
        s.extend_from_slice(format!("; exit {EXIT_NO_CWD}; }}\n  exec env -i --").as_bytes());
        for (k, v) in &c.env {
            s.push(b' ');
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            quote(&mut s, &kv);
        }
        s.extend_from_slice(format!(" {ENV_IN_VM}=1 {ENV_JOB_DIR}={GUEST_JOB_DIR}").as_bytes());
        if disk {
            s.extend_from_slice(
                format!(
                    " {ENV_DISK_DEV}={GUEST_DISK_DEV} {ENV_DISK_MOUNT}={GUEST_DISK_MOUNT} \"{ENV_DISK_MAJMIN}=$DISK_MAJMIN\""
                )
                .as_bytes(),
            );
        }
        s.push(b' ');
        quote(&mut s, &c.program);
        for a in &c.args {
            s.push(b' ');
            quote(&mut s, a);
        }
        s.extend_from_slice(
            format!(
                "\n) </dev/null >$J/output.{i} 2>&1\necho $? > $J/status.{i}\n\
                 read -r t1 _ < /proc/uptime\necho \"$t0 $t1\" > $J/time.{i}\n"
            )
            .as_bytes(),
        );
    }
    s.extend_from_slice(b"kill $HEARTBEAT_PID 2>/dev/null\n");
    Ok(s)
}

/// Streams the commands' output files to the host as the guest writes them.
///
/// Program output goes to `<job>/.vm/output.N` over 9p rather than through the emulated
/// serial port, which carries only ~280 KB/s under TCG; the host follows the files.
/// `time.N` appears once `output.N` is complete.
#[derive(Debug)]
pub struct OutputFollower {
    job_dir: PathBuf,
    labels: Vec<String>,
    index: usize,
    offset: u64,
    started: bool,
}

impl OutputFollower {
    /// Follows the outputs of `commands` in `job_dir`.
    pub fn new(job_dir: &Path, commands: &[GuestCommand]) -> Self {
        Self {
            job_dir: job_dir.to_owned(),
            labels: commands.iter().map(|c| c.label.clone()).collect(),
            index: 0,
            offset: 0,
            started: false,
        }
    }

    fn copy_new(&mut self, file: &mut std::fs::File, sink: &mut dyn Write) -> std::io::Result<()> {
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        sink.write_all(&buf)?;
        sink.flush()
    }

    /// Copies whatever the guest wrote since the last call to `sink`, with a header line
    /// before each command when there are several.
    pub fn poll(&mut self, sink: &mut dyn Write) -> std::io::Result<()> {
        while let Some(label) = self.labels.get(self.index) {
            let out = vm_file(&self.job_dir, &format!("output.{}", self.index));
            let mut file = match std::fs::File::open(&out) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            if !self.started {
                self.started = true;
                if self.labels.len() > 1 {
                    let n = self.labels.len();
                    writeln!(sink, "==> daros-vmtest [{}/{n}] {label}", self.index + 1)?;
                }
            }
            self.copy_new(&mut file, sink)?;
            if !vm_file(&self.job_dir, &format!("time.{}", self.index)).exists() {
                return Ok(());
            }
            // Complete: take what was written between the read above and time.N.
            self.copy_new(&mut file, sink)?;
            self.index += 1;
            self.offset = 0;
            self.started = false;
        }
        Ok(())
    }
}

/// The runner's file `name` inside the job directory.
pub fn vm_file(job_dir: &Path, name: &str) -> PathBuf {
    job_dir.join(".vm").join(name)
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, JobError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(JobError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

fn parse_seconds_pair(text: &str) -> Option<Duration> {
    let mut it = text.split_whitespace().map(str::parse::<f64>);
    let (Some(Ok(a)), Some(Ok(b))) = (it.next(), it.next()) else {
        return None;
    };
    (b >= a).then(|| Duration::from_secs_f64(b - a))
}

/// Reads what the guest wrote for each command.
pub fn read_results(
    job_dir: &Path,
    commands: &[GuestCommand],
) -> Result<Vec<CommandResult>, JobError> {
    let mut results = Vec::with_capacity(commands.len());
    for (i, c) in commands.iter().enumerate() {
        let status = read_optional(&vm_file(job_dir, &format!("status.{i}")))?
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<i32>().ok());
        let output = read_optional(&vm_file(job_dir, &format!("output.{i}")))?.unwrap_or_default();
        let elapsed = read_optional(&vm_file(job_dir, &format!("time.{i}")))?
            .and_then(|b| parse_seconds_pair(&String::from_utf8_lossy(&b)));
        results.push(CommandResult {
            label: c.label.clone(),
            status,
            output,
            elapsed,
        });
    }
    Ok(results)
}

/// The guest's uptime when the job started, i.e. how long the guest took to boot.
pub fn read_boot_time(job_dir: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(vm_file(job_dir, "boot-uptime")).ok()?;
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Runs a generated script on the host with dash, with `J` pointed at a temp dir.
    fn run_on_host(commands: &[GuestCommand]) -> (tempfile::TempDir, Vec<CommandResult>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".vm")).unwrap();
        let script = script(commands, false).unwrap();
        let script = String::from_utf8(script).unwrap().replace(
            &format!("J={GUEST_JOB_DIR}/.vm"),
            &format!("J={}/.vm", dir.path().display()),
        );
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap();
        assert!(out.status.success());
        let results = read_results(dir.path(), commands).unwrap();
        (dir, results)
    }

    #[test]
    fn script_passes_arguments_cwd_and_exactly_the_given_env() {
        let tricky = "it's a \"quoted\" $HOME `x` \\ arg\nwith newline";
        let c = GuestCommand::new("/bin/sh")
            .args(["-c", "printf '%s|' \"$1\" \"$(pwd)\" \"$FOO\" \"$DAROS_IN_VM\" \"${HOME-unset}\"; exit 3", "sh", tricky])
            .cwd("/tmp")
            .env("FOO", "b'a r");
        let (_d, r) = run_on_host(&[c]);
        assert_eq!(r[0].status, Some(3));
        let out = String::from_utf8(r[0].output.clone()).unwrap();
        assert_eq!(out, format!("{tricky}|/tmp|b'a r|1|unset|"));
        assert!(r[0].elapsed.is_some());
    }

    #[test]
    fn the_job_beats_while_it_runs_and_stops_its_heartbeat_after() {
        let (d, r) = run_on_host(&[GuestCommand::new("true")]);
        assert_eq!(r[0].status, Some(0));
        let beat = std::fs::read_to_string(d.path().join(".vm").join(HEARTBEAT)).unwrap();
        assert_eq!(beat.split_whitespace().count(), 2, "an uptime: {beat:?}");
        // The loop is killed at the end: no process is left running the script
        // (whose text names the temp dir).
        let dir = d.path().display().to_string();
        let running = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(Result::ok)
                .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
                .any(|c| String::from_utf8_lossy(&c).contains(&dir))
        };
        let t0 = std::time::Instant::now();
        while running() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!running(), "the heartbeat loop outlived the job");
    }

    #[test]
    fn each_command_gets_its_own_status_and_output() {
        let ok = GuestCommand::new("echo").args(["one"]);
        let missing_cwd = GuestCommand::new("true").cwd("/daros-test-no-such-dir");
        let not_found = GuestCommand::new("daros-test-no-such-program");
        let (_d, r) = run_on_host(&[ok, missing_cwd, not_found]);
        assert_eq!(
            r.iter().map(|r| r.status).collect::<Vec<_>>(),
            vec![Some(0), Some(EXIT_NO_CWD), Some(127)]
        );
        assert_eq!(r[0].output, b"one\n");
        assert!(String::from_utf8_lossy(&r[1].output).contains("does not exist in the guest"));
    }

    #[test]
    fn follower_streams_outputs_in_order_with_headers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".vm")).unwrap();
        let cmds = [GuestCommand::new("a"), GuestCommand::new("b")];
        let mut f = OutputFollower::new(dir.path(), &cmds);
        let mut sink = Vec::new();
        let vm = |n: &str| vm_file(dir.path(), n);
        f.poll(&mut sink).unwrap();
        assert!(sink.is_empty(), "nothing started yet");
        std::fs::write(vm("output.0"), "one ").unwrap();
        f.poll(&mut sink).unwrap();
        // Output of command 1 that has not finished is not skipped ahead of command 0.
        std::fs::write(vm("output.1"), "three").unwrap();
        std::fs::write(vm("output.0"), "one two\n").unwrap();
        f.poll(&mut sink).unwrap();
        std::fs::write(vm("time.0"), "1 2").unwrap();
        f.poll(&mut sink).unwrap();
        let want = "==> daros-vmtest [1/2] a\none two\n==> daros-vmtest [2/2] b\nthree";
        assert_eq!(String::from_utf8(sink).unwrap(), want);
    }

    #[test]
    fn bad_commands_are_rejected_with_the_field() {
        let e = script(&[GuestCommand::new("x").env("A=B", "1")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("environment variable name"), "{e}");
        let e = script(&[GuestCommand::new("x").cwd("rel")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not absolute"), "{e}");
        let e = script(&[GuestCommand::new("")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty program"), "{e}");
    }

    #[test]
    fn missing_results_are_none() {
        let dir = tempfile::tempdir().unwrap();
        let r = read_results(dir.path(), &[GuestCommand::new("x")]).unwrap();
        assert_eq!(
            (r[0].status, r[0].elapsed, r[0].output.len()),
            (None, None, 0)
        );
        assert_eq!(read_boot_time(dir.path()), None);
    }
}
