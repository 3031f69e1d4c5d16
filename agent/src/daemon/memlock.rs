//! Keeps the agent's own pages in memory. Under the memory pressure the agent
//! exists to manage, the kernel reclaims the least recently used pages —
//! the agent's rarely run code and data among them — and the protection loop
//! then waits on disk (refaults) at the moment it must act: measured in the
//! isolation bench's memory scenario, seconds where darosd major-faulted 4-100
//! pages and took 0.5-1 core were the seconds the protected workload fell to
//! 46-82 % of its target. `mlockall` with `MCL_ONFAULT` (as earlyoom does) locks
//! each page once it is used, so the agent's resident set stays resident and
//! nothing it never touches (most of a binary's mapping) is read in for it.

use rustix::mm::{MlockAllFlags, mlockall};

use crate::model::caps::Feature;

/// Locks the pages the process uses, now and from now on, where `enabled`;
/// says what came of it (a failure is reported, not fatal).
pub fn lock(enabled: bool) -> Feature {
    if !enabled {
        return Feature::no("off (agent.lock_memory = false)");
    }
    let flags = MlockAllFlags::CURRENT | MlockAllFlags::FUTURE | MlockAllFlags::ONFAULT;
    match mlockall(flags) {
        Ok(()) => Feature::yes("mlockall on fault: the agent's used pages are never reclaimed"),
        Err(e) => Feature::no(format!(
            "mlockall refused ({e}): needs CAP_IPC_LOCK or a memlock limit above the agent's \
             mappings (systemd: CapabilityBoundingSet= CAP_IPC_LOCK); the agent's pages may be \
             reclaimed under memory pressure"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_is_reported_as_off() {
        let f = lock(false);
        assert!(
            !f.available && f.detail.contains("agent.lock_memory"),
            "{f:?}"
        );
    }
}
