//! Sidecars inside the shim: processes run beside the workload, each in its
//! own process group but in the workload's cgroups, as its user, confined
//! like it, writing into the same output pipes (so into the instance's
//! log). One that exits is started again after a backoff (1 s doubling to
//! 30 s; back to 1 s after it ran 30 s) while the workload runs; when the
//! workload's main process ends, every sidecar is killed and reaped.

use super::protocol::SidecarPlan;
use crate::logs::{OutputStream, RotatingLog};
use crate::sys::ChildSetup;
use crate::time::unix_nanos;
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A sidecar that ran this long starts its backoff over.
const STABLE_AFTER: Duration = Duration::from_secs(30);

struct Side {
    plan: SidecarPlan,
    child: Option<(Child, OwnedFd, Instant)>,
    backoff: Duration,
    next_start: Option<Instant>,
}

/// The sidecars of one run.
pub struct Sidecars {
    sides: Vec<Side>,
    setup: ChildSetup,
    // Write ends of the workload's output pipes (closed once it ended, so
    // that the shim reads to EOF).
    out: Option<OwnedFd>,
    err: Option<OwnedFd>,
}

impl Sidecars {
    /// Sidecars of `plans`, spawned with `setup` (the workload's, without its
    /// stage pipe) writing into `out` and `err`.
    pub fn new(plans: &[SidecarPlan], setup: ChildSetup, out: OwnedFd, err: OwnedFd) -> Self {
        Self {
            sides: plans
                .iter()
                .map(|p| Side {
                    plan: p.clone(),
                    child: None,
                    backoff: FIRST_BACKOFF,
                    next_start: Some(Instant::now()),
                })
                .collect(),
            setup,
            out: Some(out),
            err: Some(err),
        }
    }

    /// Starts every sidecar that is due.
    pub fn start_due(&mut self, log: &mut RotatingLog) {
        let now = Instant::now();
        for i in 0..self.sides.len() {
            if self.sides[i].next_start.is_some_and(|t| t <= now) {
                self.sides[i].next_start = None;
                if let Err(e) = self.spawn(i) {
                    let s = &mut self.sides[i];
                    note(
                        log,
                        &format!(
                            "sidecar {} did not start: {e}; again in {:?}",
                            s.plan.name, s.backoff
                        ),
                    );
                    s.next_start = Some(now + s.backoff);
                    s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn spawn(&mut self, i: usize) -> std::io::Result<()> {
        let (Some(out), Some(err)) = (&self.out, &self.err) else {
            return Err(std::io::Error::other("the workload has ended"));
        };
        let plan = &self.sides[i].plan;
        let mut cmd = Command::new(&plan.program);
        cmd.args(&plan.args)
            .env_clear()
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(err.try_clone()?))
            .process_group(0);
        self.setup.clone().install_std(&mut cmd);
        let child = cmd.spawn()?;
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0))
            .ok_or_else(|| std::io::Error::other("child pid 0"))?;
        let fd = pidfd_open(pid, PidfdFlags::empty())?;
        self.sides[i].child = Some((child, fd, Instant::now()));
        Ok(())
    }

    /// The pidfds of the running sidecars, with their index.
    pub fn pidfds(&self) -> Vec<(usize, &OwnedFd)> {
        self.sides
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.child.as_ref().map(|(_, fd, _)| (i, fd)))
            .collect()
    }

    /// When the next sidecar is due to start.
    pub fn next_start(&self) -> Option<Instant> {
        self.sides.iter().filter_map(|s| s.next_start).min()
    }

    /// Sidecar `i`'s pidfd became readable: reap it, end what is left of its
    /// group, and schedule its restart.
    pub fn exited(&mut self, i: usize, log: &mut RotatingLog) {
        let Some(s) = self.sides.get_mut(i) else {
            return;
        };
        let Some((mut child, _, since)) = s.child.take() else {
            return;
        };
        kill_group(child.id());
        let status = child
            .wait()
            .map(|st| match (st.code(), st.signal()) {
                (Some(c), _) => format!("exited with code {c}"),
                (_, Some(sig)) => format!("was killed by signal {sig}"),
                _ => "ended".into(),
            })
            .unwrap_or_else(|e| format!("could not be reaped: {e}"));
        if since.elapsed() >= STABLE_AFTER {
            s.backoff = FIRST_BACKOFF;
        }
        note(
            log,
            &format!(
                "sidecar {} {status}; starting it again in {:?}",
                s.plan.name, s.backoff
            ),
        );
        s.next_start = Some(Instant::now() + s.backoff);
        s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
    }

    /// Forwards `sig` to every sidecar's group.
    pub fn signal(&self, sig: Signal) {
        for (child, _, _) in self.sides.iter().filter_map(|s| s.child.as_ref()) {
            if let Some(p) = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0)) {
                let _ = rustix::process::kill_process_group(p, sig);
            }
        }
    }

    /// The workload ended: kill and reap every sidecar; no more starts.
    pub fn stop_all(&mut self) {
        self.out = None;
        self.err = None;
        for s in &mut self.sides {
            s.next_start = None;
            if let Some((mut child, _, _)) = s.child.take() {
                kill_group(child.id());
                let _ = child.wait();
            }
        }
    }
}

fn kill_group(pid: u32) {
    if let Some(p) = Pid::from_raw(i32::try_from(pid).unwrap_or(0)) {
        let _ = rustix::process::kill_process_group(p, Signal::KILL);
    }
}

/// A line of the shim's own into the instance's log (stderr stream).
fn note(log: &mut RotatingLog, text: &str) {
    let line = format!("daros-shim: {text}\n");
    let _ = log.write(OutputStream::Stderr, line.as_bytes(), unix_nanos());
}
