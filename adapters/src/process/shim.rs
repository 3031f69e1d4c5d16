//! `daros-shim`: the tiny per-run process that owns a workload process, as
//! conmon or containerd-shim do, so that the workload outlives the agent.
//!
//! The agent starts `daros-shim <run>/shim.json`; that first process
//! re-executes itself detached (`--detached`, new session) and exits, so the
//! shim is nobody's child: it is reparented to init and keeps running when
//! the agent dies. The detached shim:
//! 1. spawns the workload in its own process group, which before exec joins
//!    its cgroups, takes its `oom_score_adj`, drops to its user and group,
//!    ties its life to the shim (`PR_SET_PDEATHSIG`) and enters its working
//!    directory, reporting each step so a failure names it;
//! 2. writes `started.json` and one report line on stdout, then lets go of
//!    the agent's pipe;
//! 3. copies the workload's stdout and stderr into the rotated log;
//! 4. forwards SIGTERM, SIGINT and SIGHUP to the workload's process group;
//! 5. when the workload's main process ends, kills what is left of its
//!    process group, drains its pipes, writes `exit.json` and exits.
//!
//! Sidecars (`sidecar` trait) run beside the workload under the same setup,
//! into the same pipes; see [`super::sidecars`].

use super::protocol::{
    EXIT, ExitRecord, FAILED, LaunchFailure, ProcessIdentity, STARTED, ShimConfig, ShimReport,
    StartedRecord, read_json, write_json_atomic,
};
use super::sidecars::Sidecars;
use crate::logs::{OutputStream, RotatingLog};
use crate::status::ExitStatus;
use crate::sys::{ChildSetup, SignalFd, Stage, StagePipe, dup_onto};
use crate::time::{now, unix_nanos};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open};
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Flag of the detached second stage.
pub const DETACHED_FLAG: &str = "--detached";

/// How long output is still collected after the workload exited, for
/// descendants that keep its pipes open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);
/// Text without a newline is written as a partial record after this long.
const PARTIAL_FLUSH: Duration = Duration::from_millis(500);

/// Entry point of the `daros-shim` binary.
pub fn main_from_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().skip(1).collect();
    match args.as_slice() {
        [flag, cfg] if flag == DETACHED_FLAG => ExitCode::from(detached(Path::new(cfg))),
        [cfg] => ExitCode::from(detach(cfg)),
        _ => {
            eprintln!("usage: daros-shim <run-dir>/shim.json");
            ExitCode::from(2)
        }
    }
}

// First stage: start the detached shim and leave.
fn detach(cfg: &OsString) -> u8 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return report_failure("locate shim binary", &e),
    };
    // stdin, stdout (the report pipe) and stderr (shim.log) are inherited.
    match Command::new(exe)
        .arg(DETACHED_FLAG)
        .arg(cfg)
        .current_dir("/")
        .spawn()
    {
        Ok(_) => 0,
        Err(e) => report_failure("spawn detached shim", &e),
    }
}

fn report_failure(stage: &str, e: &io::Error) -> u8 {
    let f = LaunchFailure {
        stage: stage.to_string(),
        errno: e.raw_os_error(),
        message: e.to_string(),
    };
    report(&ShimReport::Failed(f));
    1
}

fn report(r: &ShimReport) {
    if let Ok(mut line) = serde_json::to_vec(r) {
        line.push(b'\n');
        let mut out = io::stdout().lock();
        let _ = out.write_all(&line);
        let _ = out.flush();
    }
}

fn detached(cfg_path: &Path) -> u8 {
    // Own session: no terminal, no signals meant for the agent's group.
    let _ = rustix::process::setsid();
    let cfg: ShimConfig = match read_json(cfg_path) {
        Ok(Some(c)) => c,
        Ok(None) => {
            return report_failure(
                "read shim config",
                &io::Error::from(io::ErrorKind::NotFound),
            );
        }
        Err(e) => return report_failure("read shim config", &e),
    };
    match supervise(&cfg) {
        Ok(()) => 0,
        Err(Failure::Launch(f)) => {
            let _ = write_json_atomic(&cfg.run_dir.join(FAILED), &f);
            eprintln!(
                "daros-shim {}: start failed at {}: {}",
                cfg.id, f.stage, f.message
            );
            report(&ShimReport::Failed(f));
            3
        }
        Err(Failure::Run(e)) => {
            eprintln!("daros-shim {}: {e}", cfg.id);
            4
        }
    }
}

enum Failure {
    Launch(LaunchFailure),
    Run(io::Error),
}

fn launch_err(stage: &str, e: &io::Error) -> Failure {
    Failure::Launch(LaunchFailure {
        stage: stage.to_string(),
        errno: e.raw_os_error(),
        message: e.to_string(),
    })
}

fn cstring(stage: &str, p: &Path) -> Result<CString, Failure> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        launch_err(
            stage,
            &io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"),
        )
    })
}

fn supervise(cfg: &ShimConfig) -> Result<(), Failure> {
    let signals = SignalFd::block_and_open(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
        .map_err(|e| launch_err("signalfd", &e))?;
    let mut log =
        RotatingLog::open(&cfg.log_dir, cfg.log_limits).map_err(|e| launch_err("open log", &e))?;

    let conf = super::confine::Confinement::prepare(&cfg.security, cfg.uid.zip(cfg.gid))
        .map_err(|e| launch_err("prepare confinement", &e))?;
    let stages = StagePipe::new().map_err(|e| launch_err("stage pipe", &e))?;
    let setup = ChildSetup {
        cgroup_procs: cfg
            .cgroup_procs
            .iter()
            .map(|p| cstring("join cgroup", p))
            .collect::<Result<_, _>>()?,
        oom_score_adj: cfg.oom_score_adj,
        groups: cfg.groups.clone(),
        gid: cfg.gid,
        uid: cfg.uid,
        cwd: Some(cstring("change to working directory", &cfg.working_dir)?),
        die_with_parent: Some(i32::try_from(std::process::id()).unwrap_or(0)),
        stage_fd: stages.write_fd(),
        keep_caps: conf.keep_caps,
        no_new_privs: conf.no_new_privs,
        landlock_fd: conf.landlock.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
        seccomp: conf.seccomp,
    };
    // Our own pipes: the sidecars write into them too.
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| launch_err("output pipe", &e.into()))
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let side_setup = ChildSetup {
        stage_fd: None,
        ..setup.clone()
    };
    let mut cmd = Command::new(&cfg.program);
    cmd.args(&cfg.args)
        .env_clear()
        .envs(cfg.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(
            out_w
                .try_clone()
                .map_err(|e| launch_err("output pipe", &e))?,
        ))
        .stderr(Stdio::from(
            err_w
                .try_clone()
                .map_err(|e| launch_err("output pipe", &e))?,
        ))
        .process_group(0);
    setup.install_std(&mut cmd);
    let spawned = cmd.spawn();
    let last = stages.last_stage();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let stage = last.map_or("prepare child", Stage::describe);
            let what = match last {
                Some(Stage::Exec) => format!("{}: {e}", cfg.program.display()),
                Some(Stage::JoinCgroup) => format!(
                    "{}: {e}",
                    cfg.cgroup_procs
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(Stage::Chdir) => format!("{}: {e}", cfg.working_dir.display()),
                _ => e.to_string(),
            };
            return Err(Failure::Launch(LaunchFailure {
                stage: stage.to_string(),
                errno: e.raw_os_error(),
                message: what,
            }));
        }
    };
    let pid = child.id();
    let pidfd = Pid::from_raw(i32::try_from(pid).unwrap_or(0))
        .ok_or_else(|| Failure::Run(io::Error::other("child pid 0")))
        .and_then(|p| pidfd_open(p, PidfdFlags::empty()).map_err(|e| Failure::Run(e.into())))?;
    let started = StartedRecord {
        shim: ProcessIdentity::of(std::process::id()).map_err(Failure::Run)?,
        child: ProcessIdentity::of(pid).map_err(Failure::Run)?,
        started_at: now(),
    };
    write_json_atomic(&cfg.run_dir.join(STARTED), &started).map_err(Failure::Run)?;
    report(&ShimReport::Started(started));
    // Let go of the agent's report pipe: it reads to EOF.
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        let _ = dup_onto(&null, 1);
    }

    drop(cmd);
    let mut sides = Sidecars::new(&cfg.sidecars, side_setup, out_w, err_w);
    sides.start_due(&mut log);
    let status = pump(
        cfg,
        &mut log,
        Some(out_r),
        Some(err_r),
        &pidfd,
        &signals,
        &mut child,
        pid,
        &mut sides,
    )?;
    if let Err(e) = log.finish(unix_nanos()) {
        eprintln!("daros-shim {}: finishing log: {e}", cfg.id);
    }
    let rec = ExitRecord {
        status,
        finished_at: now(),
    };
    write_json_atomic(&cfg.run_dir.join(EXIT), &rec).map_err(Failure::Run)?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn pump(
    cfg: &ShimConfig,
    log: &mut RotatingLog,
    mut out: Option<OwnedFd>,
    mut err: Option<OwnedFd>,
    pidfd: &OwnedFd,
    signals: &SignalFd,
    child: &mut std::process::Child,
    pid: u32,
    sides: &mut Sidecars,
) -> Result<ExitStatus, Failure> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut exit: Option<(ExitStatus, Instant)> = None;
    let mut log_failed = false;
    let mut pending_since: Option<Instant> = None;
    loop {
        if let Some((status, at)) = exit
            && ((out.is_none() && err.is_none()) || at.elapsed() >= DRAIN_AFTER_EXIT)
        {
            return Ok(status);
        }
        let timeout = if exit.is_some() {
            Some(Duration::from_millis(100))
        } else if pending_since.is_some() {
            Some(PARTIAL_FLUSH)
        } else {
            None
        };
        // Wake for the next sidecar start too.
        let timeout = match (timeout, sides.next_start()) {
            (t, Some(at)) => {
                let until = at.saturating_duration_since(Instant::now());
                Some(t.map_or(until, |t| t.min(until)))
            }
            (t, None) => t,
        };
        let ts = timeout.map(|d| Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(1),
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
        let mut which: Vec<u8> = Vec::with_capacity(4);
        if let Some(o) = &out {
            fds.push(PollFd::new(o, PollFlags::IN));
            which.push(0);
        }
        if let Some(e) = &err {
            fds.push(PollFd::new(e, PollFlags::IN));
            which.push(1);
        }
        if exit.is_none() {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
            which.push(2);
        }
        fds.push(PollFd::new(signals, PollFlags::IN));
        which.push(3);
        let side_fds = sides.pidfds();
        for (i, fd) in &side_fds {
            fds.push(PollFd::new(*fd, PollFlags::IN));
            which.push(u8::try_from(SIDE_BASE + i).unwrap_or(u8::MAX));
        }
        match poll(&mut fds, ts.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Failure::Run(e.into())),
        }
        let ready: Vec<u8> = fds
            .iter()
            .zip(&which)
            .filter(|(f, _)| !f.revents().is_empty())
            .map(|(_, w)| *w)
            .collect();
        drop(fds);
        for w in ready {
            match w {
                0 | 1 => {
                    let (slot, stream) = if w == 0 {
                        (&mut out, OutputStream::Stdout)
                    } else {
                        (&mut err, OutputStream::Stderr)
                    };
                    let n = match slot.as_ref().map(|fd| rustix::io::read(fd, &mut buf)) {
                        Some(Ok(n)) => n,
                        Some(Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN)) => continue,
                        Some(Err(_)) | None => 0,
                    };
                    if n == 0 {
                        *slot = None;
                        continue;
                    }
                    if let Err(e) = log.write(stream, &buf[..n], unix_nanos())
                        && !log_failed
                    {
                        log_failed = true;
                        eprintln!(
                            "daros-shim {}: writing log: {e} (output is dropped)",
                            cfg.id
                        );
                    }
                }
                2 => {
                    // The leader exited and is not reaped yet, so its group
                    // id cannot have been reused: end what is left of the
                    // group (the workload is its main process, as a
                    // container's init is) and its sidecars, then reap.
                    if let Some(p) = Pid::from_raw(i32::try_from(pid).unwrap_or(0)) {
                        let _ = rustix::process::kill_process_group(p, Signal::KILL);
                    }
                    sides.stop_all();
                    if let Some(st) = child.try_wait().map_err(Failure::Run)? {
                        exit = Some((
                            ExitStatus {
                                code: st.code(),
                                signal: st.signal(),
                            },
                            Instant::now(),
                        ));
                    }
                }
                3 => {
                    while let Ok(Some(sig)) = signals.read() {
                        if exit.is_none() {
                            forward(pid, sig);
                            if let Some(s) = signal_of(sig) {
                                sides.signal(s);
                            }
                        }
                    }
                }
                w => sides.exited(usize::from(w) - SIDE_BASE, log),
            }
        }
        if exit.is_none() {
            sides.start_due(log);
        }
        if log.has_pending() {
            let since = *pending_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= PARTIAL_FLUSH {
                let _ = log.flush_partial(unix_nanos());
                pending_since = None;
            }
        } else {
            pending_since = None;
        }
    }
}

/// Poll slots from here on are sidecars' pidfds.
const SIDE_BASE: usize = 10;

fn signal_of(sig: i32) -> Option<Signal> {
    match sig {
        libc::SIGTERM => Some(Signal::TERM),
        libc::SIGINT => Some(Signal::INT),
        libc::SIGHUP => Some(Signal::HUP),
        _ => None,
    }
}

fn forward(pgid: u32, sig: i32) {
    let (Some(pid), Some(sig)) = (
        Pid::from_raw(i32::try_from(pgid).unwrap_or(0)),
        signal_of(sig),
    ) else {
        return;
    };
    let _ = rustix::process::kill_process_group(pid, sig);
}
