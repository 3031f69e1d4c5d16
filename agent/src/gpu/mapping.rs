//! Which workload a process belongs to, by its cgroup (`/proc/<pid>/cgroup`).

use std::path::Path;

use crate::cgroup::CgroupPath;

/// Which line of `/proc/<pid>/cgroup` names the process's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLine {
    /// The unified (`0::`) line.
    Unified,
    /// The v1 hierarchy holding this controller.
    V1(String),
}

/// The cgroup of `pid` as listed in `<proc_root>/<pid>/cgroup`.
pub fn cgroup_of_pid(proc_root: &Path, pid: u32, line: &CgroupLine) -> Option<CgroupPath> {
    let p = procfs::process::Process::new_with_root(proc_root.join(pid.to_string())).ok()?;
    let groups = p.cgroups().ok()?;
    let g = groups.0.into_iter().find(|g| match line {
        CgroupLine::Unified => g.hierarchy == 0,
        CgroupLine::V1(c) => g.controllers.iter().any(|x| x == c),
    })?;
    CgroupPath::new(&g.pathname).ok()
}

/// Workload ids by cgroup path, for longest-prefix lookups.
#[derive(Debug, Default, Clone)]
pub struct WorkloadIndex {
    entries: Vec<(CgroupPath, String)>,
}

impl WorkloadIndex {
    /// Builds the index from `(cgroup, id)` pairs.
    pub fn new(mut entries: Vec<(CgroupPath, String)>) -> Self {
        // Deepest first so the first match is the most specific workload.
        entries.sort_by_key(|(p, _)| std::cmp::Reverse(p.as_str().len()));
        WorkloadIndex { entries }
    }

    /// The workload whose cgroup holds `cg` (directly or in a descendant).
    pub fn lookup(&self, cg: &CgroupPath) -> Option<&str> {
        self.entries
            .iter()
            .find(|(p, _)| cg.starts_with(p) && !p.as_str().is_empty())
            .map(|(_, id)| id.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let idx = WorkloadIndex::new(vec![
            (
                CgroupPath::new("kubepods/burstable/pod1").unwrap(),
                "k8s/1".into(),
            ),
            (
                CgroupPath::new("system.slice").unwrap(),
                "systemd/system.slice".into(),
            ),
            (
                CgroupPath::new("system.slice/a.service").unwrap(),
                "systemd/a.service".into(),
            ),
        ]);
        let c = |s| CgroupPath::new(s).unwrap();
        assert_eq!(idx.lookup(&c("kubepods/burstable/pod1/ctr")), Some("k8s/1"));
        assert_eq!(
            idx.lookup(&c("system.slice/a.service")),
            Some("systemd/a.service")
        );
        assert_eq!(
            idx.lookup(&c("system.slice/b.service")),
            Some("systemd/system.slice")
        );
        assert_eq!(idx.lookup(&c("kubepods/burstable/pod10")), None);
        assert_eq!(idx.lookup(&CgroupPath::root()), None);
    }

    #[test]
    fn own_process_cgroup_is_readable() {
        let pid = std::process::id();
        let l = cgroup_of_pid(Path::new("/proc"), pid, &CgroupLine::Unified);
        assert!(l.is_some());
    }
}
