//! Ending a run: SIGTERM to the workload's process group, the grace
//! period, then SIGKILL to the group and to every process left in its
//! cgroups, and finally the shim itself if it does not finish.

use super::pidfd::PidFd;
use crate::placement::CgroupPlacement;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use std::time::Duration;

/// Time the shim gets to record the exit after the workload was killed.
const AFTER_KILL: Duration = Duration::from_secs(10);

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// Ended within the grace period.
    Graceful,
    /// Needed SIGKILL.
    Killed,
    /// The shim did not end and was killed too: the exit is unknown.
    ShimKilled,
}

/// Stops the run whose shim is `shim` and workload `child` (leader of
/// process group `pgid`).
pub async fn terminate(
    shim: Option<&PidFd>,
    child: Option<&PidFd>,
    pgid: u32,
    cgroup: &CgroupPlacement,
    grace: Duration,
) -> StopOutcome {
    signal_all(child, pgid, cgroup, Signal::TERM, false);
    if wait_shim(shim, grace).await {
        sweep(cgroup);
        return StopOutcome::Graceful;
    }
    signal_all(child, pgid, cgroup, Signal::KILL, true);
    if wait_shim(shim, AFTER_KILL).await {
        sweep(cgroup);
        return StopOutcome::Killed;
    }
    if let Some(s) = shim {
        let _ = s.signal(Signal::KILL);
        let _ = tokio::time::timeout(AFTER_KILL, s.exited()).await;
    }
    sweep(cgroup);
    StopOutcome::ShimKilled
}

/// Kills whatever is left in the instance's cgroups (descendants that left
/// the process group), so a stopped instance leaves nothing behind.
pub fn sweep(cgroup: &CgroupPlacement) {
    if let Ok(pids) = cgroup.member_pids() {
        for p in pids {
            if let Some(pid) = Pid::from_raw(i32::try_from(p).unwrap_or(0)) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}

fn signal_all(
    child: Option<&PidFd>,
    pgid: u32,
    cgroup: &CgroupPlacement,
    sig: Signal,
    with_cgroup: bool,
) {
    // The group id is ours only while its leader lives; afterwards the
    // cgroup is the reliable list.
    if let Some(c) = child
        && !c.has_exited()
    {
        let _ = c.signal(sig);
        if let Some(pid) = Pid::from_raw(i32::try_from(pgid).unwrap_or(0)) {
            let _ = kill_process_group(pid, sig);
        }
    }
    if (with_cgroup || child.is_none_or(PidFd::has_exited))
        && let Ok(pids) = cgroup.member_pids()
    {
        for p in pids {
            if let Some(pid) = Pid::from_raw(i32::try_from(p).unwrap_or(0)) {
                let _ = kill_process(pid, sig);
            }
        }
    }
}

async fn wait_shim(shim: Option<&PidFd>, d: Duration) -> bool {
    match shim {
        None => true,
        Some(s) => tokio::time::timeout(d, s.exited()).await.is_ok(),
    }
}
