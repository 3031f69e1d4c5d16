//! Where the cgroup hierarchies of this host are mounted, and which mode that makes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fs::{CgroupError, read_string};

/// How the host mounts cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CgroupMode {
    /// Unified hierarchy only: every controller lives in one cgroup2 tree.
    V2,
    /// Controllers in v1 hierarchies plus a cgroup2 mount (usually `/sys/fs/cgroup/unified`)
    /// without controllers.
    Hybrid,
    /// Only v1 hierarchies.
    V1,
}

impl std::fmt::Display for CgroupMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CgroupMode::V2 => "v2",
            CgroupMode::Hybrid => "hybrid",
            CgroupMode::V1 => "v1",
        })
    }
}

/// One mounted v1 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Mount {
    /// Controllers bound to it (`cpu`, `cpuacct`, ...); co-mounted ones share a mount.
    pub controllers: Vec<String>,
    /// Mount point.
    pub path: PathBuf,
}

/// The cgroup mounts of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// Mode derived from the mounts.
    pub mode: CgroupMode,
    /// The cgroup2 mount: the whole tree on v2, the controller-less unified mount on hybrid.
    pub v2: Option<PathBuf>,
    /// v1 hierarchies with controllers (named hierarchies such as `name=systemd` excluded).
    pub v1: Vec<V1Mount>,
}

/// Where mount information is read from.
pub const MOUNTINFO: &str = "/proc/self/mountinfo";

impl CgroupLayout {
    /// Detects the layout of the running host.
    pub fn detect() -> Result<Self, CgroupError> {
        let text = read_string(Path::new(MOUNTINFO))?;
        Self::from_mountinfo(&text).ok_or_else(|| {
            CgroupError::Unsupported(format!("no cgroup or cgroup2 mount found in {MOUNTINFO}"))
        })
    }

    /// Builds the layout from the text of a mountinfo file; `None` if no cgroup is mounted.
    pub fn from_mountinfo(text: &str) -> Option<Self> {
        let mut v2: Vec<PathBuf> = Vec::new();
        let mut v1: Vec<V1Mount> = Vec::new();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let Some(mount_point) = left.split(' ').nth(4) else {
                continue;
            };
            let mut r = right.split(' ');
            let (Some(fstype), Some(_source), Some(superopts)) = (r.next(), r.next(), r.next())
            else {
                continue;
            };
            let path = PathBuf::from(unescape(mount_point));
            match fstype {
                "cgroup2" => v2.push(path),
                "cgroup" => {
                    let controllers: Vec<String> = superopts
                        .split(',')
                        .filter(|o| KNOWN_V1_CONTROLLERS.contains(o))
                        .map(str::to_string)
                        .collect();
                    if !controllers.is_empty() && !v1.iter().any(|m| m.path == path) {
                        v1.push(V1Mount { controllers, path });
                    }
                }
                _ => {}
            }
        }
        // Prefer the conventional mount points when several cgroup2 mounts exist.
        let v2 = v2
            .iter()
            .find(|p| p.as_path() == Path::new("/sys/fs/cgroup"))
            .or_else(|| {
                v2.iter()
                    .find(|p| p.as_path() == Path::new("/sys/fs/cgroup/unified"))
            })
            .or(v2.first())
            .cloned();
        let mode = match (v1.is_empty(), v2.is_some()) {
            (true, true) => CgroupMode::V2,
            (false, true) => CgroupMode::Hybrid,
            (false, false) => CgroupMode::V1,
            (true, false) => return None,
        };
        Some(CgroupLayout { mode, v2, v1 })
    }

    /// Mount point of the v1 hierarchy holding `controller`.
    pub fn v1_path(&self, controller: &str) -> Option<&Path> {
        self.v1
            .iter()
            .find(|m| m.controllers.iter().any(|c| c == controller))
            .map(|m| m.path.as_path())
    }
}

/// v1 controllers the kernel can bind to a hierarchy.
const KNOWN_V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "blkio",
    "pids",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "perf_event",
    "hugetlb",
    "rdma",
    "misc",
];

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on the hybrid development hosts.
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    /// A systemd host in unified mode.
    const V2: &str = "\
25 21 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
26 21 0:23 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:5 - bpf bpf rw,mode=700
";

    /// A v1-only host with co-mounted cpu,cpuacct.
    const V1: &str = "\
28 21 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
29 21 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,memory
30 21 0:26 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
";

    #[test]
    fn hybrid_host() {
        let l = CgroupLayout::from_mountinfo(HYBRID).unwrap();
        assert_eq!(l.mode, CgroupMode::Hybrid);
        assert_eq!(l.v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(
            l.v1_path("memory"),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(
            l.v1_path("cpuacct"),
            Some(Path::new("/sys/fs/cgroup/cpuacct"))
        );
        assert_eq!(l.v1_path("freezer"), None);
        assert!(l.v1.iter().all(|m| !m.path.ends_with("systemd")));
    }

    #[test]
    fn unified_host() {
        let l = CgroupLayout::from_mountinfo(V2).unwrap();
        assert_eq!(l.mode, CgroupMode::V2);
        assert_eq!(l.v2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert!(l.v1.is_empty());
    }

    #[test]
    fn legacy_host_with_comounted_cpu() {
        let l = CgroupLayout::from_mountinfo(V1).unwrap();
        assert_eq!(l.mode, CgroupMode::V1);
        assert_eq!(l.v1_path("cpu"), l.v1_path("cpuacct"));
        assert_eq!(
            l.v1_path("cpu"),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct"))
        );
    }

    #[test]
    fn no_cgroups() {
        assert!(CgroupLayout::from_mountinfo("1 0 0:1 / / rw - ext4 /dev/vda rw\n").is_none());
    }

    #[test]
    fn escaped_mount_points() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn this_host_is_detected() {
        let l = CgroupLayout::detect().unwrap();
        assert!(l.v2.is_some() || !l.v1.is_empty());
    }
}
