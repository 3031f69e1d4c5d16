//! Where the kubelet puts a pod's cgroup, so that the node agent can apply
//! the pod's D-AROS class to it. Two drivers lay pods out differently:
//!
//! ```text
//! cgroupfs: kubepods/pod<uid>                      (Guaranteed)
//!           kubepods/burstable/pod<uid>
//!           kubepods/besteffort/pod<uid>
//! systemd:  kubepods.slice/kubepods-pod<uid_>.slice
//!           kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
//!           kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice
//! ```
//! (`uid_` is the UID with `-` replaced by `_`, as systemd unit names need).
//! On cgroup v2 the tree is under the one mount; on v1 it repeats under each
//! controller's hierarchy.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// The kubelet's cgroup driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CgroupDriver {
    /// Plain directories.
    Cgroupfs,
    /// systemd slices.
    Systemd,
}

pub use daros_k8s::pod::KubeQos;

/// The relative path of a pod's cgroup under a hierarchy root.
pub fn pod_cgroup_path(uid: &str, qos: KubeQos, driver: CgroupDriver) -> PathBuf {
    match driver {
        CgroupDriver::Cgroupfs => {
            let mut p = PathBuf::from("kubepods");
            match qos {
                KubeQos::Guaranteed => {}
                KubeQos::Burstable => p.push("burstable"),
                KubeQos::BestEffort => p.push("besteffort"),
            }
            p.push(format!("pod{uid}"));
            p
        }
        CgroupDriver::Systemd => {
            let u = uid.replace('-', "_");
            let mut p = PathBuf::from("kubepods.slice");
            match qos {
                KubeQos::Guaranteed => p.push(format!("kubepods-pod{u}.slice")),
                KubeQos::Burstable => {
                    p.push("kubepods-burstable.slice");
                    p.push(format!("kubepods-burstable-pod{u}.slice"));
                }
                KubeQos::BestEffort => {
                    p.push("kubepods-besteffort.slice");
                    p.push(format!("kubepods-besteffort-pod{u}.slice"));
                }
            }
            p
        }
    }
}

/// A pod's cgroup, found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodCgroup {
    /// The driver whose layout matched.
    pub driver: CgroupDriver,
    /// The QoS class whose layout matched.
    pub qos: KubeQos,
    /// The pod's directory under each root where it exists.
    pub dirs: Vec<PathBuf>,
    /// Container cgroups inside the pod's directory (first root).
    pub containers: Vec<PathBuf>,
}

/// The pod's cgroup is not (yet) there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PodCgroupNotFound {
    /// The pod UID.
    pub uid: String,
    /// Every path tried.
    pub tried: Vec<PathBuf>,
}

impl fmt::Display for PodCgroupNotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no cgroup for pod {} (tried ", self.uid)?;
        for (i, p) in self.tried.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", p.display())?;
        }
        f.write_str(")")
    }
}

/// Finds the cgroup of pod `uid` under `roots` (the cgroup2 mount, or the
/// v1 hierarchy of each controller). With `qos` known (from
/// `status.qosClass`) only its layout is tried; otherwise all three.
/// Both drivers are tried. Only reads directories.
pub fn find_pod_cgroup(
    roots: &[PathBuf],
    uid: &str,
    qos: Option<KubeQos>,
) -> Result<PodCgroup, PodCgroupNotFound> {
    let mut tried = Vec::new();
    let classes: Vec<KubeQos> = qos.map_or_else(|| KubeQos::ALL.to_vec(), |q| vec![q]);
    for driver in [CgroupDriver::Systemd, CgroupDriver::Cgroupfs] {
        for q in &classes {
            let rel = pod_cgroup_path(uid, *q, driver);
            let dirs: Vec<PathBuf> = roots
                .iter()
                .map(|r| r.join(&rel))
                .inspect(|d| tried.push(d.clone()))
                .filter(|d| d.is_dir())
                .collect();
            if let Some(first) = dirs.first() {
                return Ok(PodCgroup {
                    driver,
                    qos: *q,
                    containers: children(first),
                    dirs,
                });
            }
        }
    }
    Err(PodCgroupNotFound {
        uid: uid.to_string(),
        tried,
    })
}

fn children(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "4c2a9d3e-1b7f-4e0a-9a51-0d6f2f6b1c9e";

    fn tree(prefix: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
    }

    #[test]
    fn layouts_of_both_drivers() {
        assert_eq!(
            pod_cgroup_path(UID, KubeQos::Burstable, CgroupDriver::Cgroupfs),
            PathBuf::from(format!("kubepods/burstable/pod{UID}"))
        );
        assert_eq!(
            pod_cgroup_path(UID, KubeQos::Guaranteed, CgroupDriver::Cgroupfs),
            PathBuf::from(format!("kubepods/pod{UID}"))
        );
        assert_eq!(
            pod_cgroup_path(UID, KubeQos::Burstable, CgroupDriver::Systemd),
            PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4c2a9d3e_1b7f_4e0a_9a51_0d6f2f6b1c9e.slice"
            )
        );
        assert_eq!(
            pod_cgroup_path(UID, KubeQos::Guaranteed, CgroupDriver::Systemd),
            PathBuf::from("kubepods.slice/kubepods-pod4c2a9d3e_1b7f_4e0a_9a51_0d6f2f6b1c9e.slice")
        );
    }

    #[test]
    fn finds_a_systemd_pod_on_v2_with_its_containers() {
        let root = tree("daros-test-kubepods-v2-");
        let pod = root.path().join(pod_cgroup_path(
            UID,
            KubeQos::BestEffort,
            CgroupDriver::Systemd,
        ));
        std::fs::create_dir_all(pod.join("cri-containerd-aaa.scope")).unwrap();
        std::fs::create_dir_all(pod.join("cri-containerd-bbb.scope")).unwrap();
        std::fs::write(pod.join("cgroup.procs"), "").unwrap();
        // Unknown class: every layout is tried.
        let found = find_pod_cgroup(&[root.path().to_path_buf()], UID, None).unwrap();
        assert_eq!(found.driver, CgroupDriver::Systemd);
        assert_eq!(found.qos, KubeQos::BestEffort);
        assert_eq!(found.dirs, std::slice::from_ref(&pod));
        assert_eq!(
            found.containers,
            [
                pod.join("cri-containerd-aaa.scope"),
                pod.join("cri-containerd-bbb.scope")
            ]
        );
    }

    #[test]
    fn finds_a_cgroupfs_pod_in_every_v1_hierarchy() {
        let root = tree("daros-test-kubepods-v1-");
        let roots: Vec<PathBuf> = ["cpu", "memory", "pids"]
            .iter()
            .map(|c| root.path().join(c))
            .collect();
        for r in &roots {
            std::fs::create_dir_all(
                r.join(pod_cgroup_path(
                    UID,
                    KubeQos::Guaranteed,
                    CgroupDriver::Cgroupfs,
                ))
                .join("c1"),
            )
            .unwrap();
        }
        // Also a different pod in burstable, which must not match.
        std::fs::create_dir_all(roots[0].join("kubepods/burstable/podother")).unwrap();
        let found = find_pod_cgroup(&roots, UID, Some(KubeQos::Guaranteed)).unwrap();
        assert_eq!(found.driver, CgroupDriver::Cgroupfs);
        assert_eq!(found.dirs.len(), 3);
        assert_eq!(found.containers.len(), 1);
        // With a wrong class it is not found, and the error lists the tries.
        let err = find_pod_cgroup(&roots, UID, Some(KubeQos::Burstable)).unwrap_err();
        assert_eq!(err.tried.len(), 6);
        assert!(
            err.to_string()
                .contains(&format!("kubepods/burstable/pod{UID}"))
        );
    }
}
