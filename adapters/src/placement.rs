//! Where an instance runs, as decided and prepared by the agent: the node
//! and the cgroups a new process must join. The adapter never writes a
//! cgroup knob (QoS enforcement is the agent's); it only moves the process
//! it starts into the `cgroup.procs` files it was given, before exec.

use daros_coordinator::FieldError;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

/// Name of the membership file of a cgroup directory (v1 and v2).
pub const CGROUP_PROCS: &str = "cgroup.procs";

/// The `cgroup.procs` files a new process of the instance joins: one on a
/// cgroup v2 host, one per hierarchy on v1 or hybrid hosts. Empty: the
/// process stays in the cgroups of its shim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CgroupPlacement {
    /// Absolute paths of `cgroup.procs` files.
    pub procs_files: Vec<PathBuf>,
}

impl CgroupPlacement {
    /// No cgroup placement.
    pub fn none() -> Self {
        Self::default()
    }

    /// The `cgroup.procs` file of each of `dirs` (cgroup directories).
    pub fn dirs<I, P>(dirs: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        Self {
            procs_files: dirs
                .into_iter()
                .map(|d| d.as_ref().join(CGROUP_PROCS))
                .collect(),
        }
    }

    /// True when no cgroup is given.
    pub fn is_empty(&self) -> bool {
        self.procs_files.is_empty()
    }

    /// Checks that every file is an absolute path to an existing
    /// `cgroup.procs`; `path` names the field in errors.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, f) in self.procs_files.iter().enumerate() {
            let p = format!("{path}[{i}]");
            if !f.is_absolute() || f.file_name().is_none_or(|n| n != CGROUP_PROCS) {
                errs.push(FieldError::new(
                    p,
                    format!(
                        "{} must be an absolute path to a {CGROUP_PROCS} file",
                        f.display()
                    ),
                ));
            } else if !f.is_file() {
                errs.push(FieldError::new(
                    p,
                    format!(
                        "{} does not exist: the agent creates the cgroup before start",
                        f.display()
                    ),
                ));
            }
        }
        errs
    }

    /// Every pid currently in any of the cgroups (used to leave nothing
    /// behind when an instance is stopped).
    pub fn member_pids(&self) -> io::Result<Vec<u32>> {
        let mut pids = Vec::new();
        for f in &self.procs_files {
            let text = match std::fs::read_to_string(f) {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }
}

/// Where an instance runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Node chosen by placement (the Kubernetes adapter binds the pod to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Cgroups for the process runtime, created and configured by the agent.
    #[serde(default, skip_serializing_if = "CgroupPlacement::is_empty")]
    pub cgroup: CgroupPlacement,
    /// `oom_score_adj` of the started process (-1000..=1000), chosen by the
    /// agent from the QoS class; it is per process, so only the adapter can
    /// set it at exec time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
}

impl Placement {
    /// Checks the placement; `path` names the field in errors.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = self.cgroup.validate(&format!("{path}.cgroup"));
        if let Some(v) = self.oom_score_adj
            && !(-1000..=1000).contains(&v)
        {
            errs.push(FieldError::new(
                format!("{path}.oomScoreAdj"),
                format!("{v} is outside -1000..=1000"),
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_relative_wrong_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join(CGROUP_PROCS);
        std::fs::write(&good, "12\n7\n12\n").unwrap();
        let p = CgroupPlacement {
            procs_files: vec![
                good.clone(),
                PathBuf::from("rel/cgroup.procs"),
                dir.path().join("tasks"),
                dir.path().join("x").join(CGROUP_PROCS),
            ],
        };
        let errs = p.validate("placement.cgroup");
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "placement.cgroup[1]",
                "placement.cgroup[2]",
                "placement.cgroup[3]"
            ]
        );
        assert!(errs[2].reason.contains("does not exist"));
        assert_eq!(p.member_pids().unwrap(), [7, 12]);
        let pl = Placement {
            oom_score_adj: Some(1001),
            ..Placement::default()
        };
        assert_eq!(pl.validate("placement")[0].path, "placement.oomScoreAdj");
    }
}
