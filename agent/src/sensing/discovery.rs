//! Finding workload cgroups: the managed root's children, Kubernetes pods and
//! systemd units. Discovered cgroups are only read, never written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cgroup::CgroupPath;
use crate::model::WorkloadKind;

/// What discovery looks for.
#[derive(Debug, Clone)]
pub struct DiscoveryConfig {
    /// The managed root (its children are `managed/<name>`).
    pub managed_root: CgroupPath,
    /// Look for Kubernetes pods.
    pub kubernetes: bool,
    /// Top-level cgroups holding pods (`kubepods.slice` for the systemd driver,
    /// `kubepods` for cgroupfs).
    pub kubepods_roots: Vec<String>,
    /// Look for systemd units.
    pub systemd: bool,
    /// Unit types reported as workloads (`service`, `slice`, `scope`).
    pub systemd_unit_types: Vec<String>,
    /// Upper bound on discovered workloads (the managed ones always count first).
    pub max_workloads: usize,
}

/// A workload found by discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// Stable id.
    pub id: String,
    /// Origin.
    pub kind: WorkloadKind,
    /// Cgroup path relative to the hierarchy roots.
    pub cgroup: CgroupPath,
    /// Kubernetes QoS class of a pod.
    pub k8s_qos: Option<String>,
}

/// Result of one discovery pass.
#[derive(Debug, Default)]
pub struct DiscoveryResult {
    /// Workloads keyed by id.
    pub workloads: BTreeMap<String, Discovered>,
    /// Workloads left out because of `max_workloads`.
    pub truncated: usize,
}

const MAX_DEPTH: usize = 8;

/// Walks every hierarchy root in `roots` and returns the union of workloads.
pub fn discover(roots: &[PathBuf], cfg: &DiscoveryConfig) -> DiscoveryResult {
    let mut found: BTreeMap<String, Discovered> = BTreeMap::new();
    for root in roots {
        managed(root, cfg, &mut found);
        if cfg.kubernetes {
            for r in &cfg.kubepods_roots {
                kubepods(root, r, &mut found);
            }
        }
        if cfg.systemd {
            systemd(root, &CgroupPath::root(), cfg, 0, &mut found);
        }
    }
    let mut result = DiscoveryResult::default();
    // Managed workloads first, then the rest in id order, up to the cap.
    let (managed, others): (Vec<_>, Vec<_>) = found
        .into_iter()
        .partition(|(_, d)| d.kind == WorkloadKind::Managed);
    for (id, d) in managed.into_iter().chain(others) {
        if result.workloads.len() >= cfg.max_workloads {
            result.truncated += 1;
            continue;
        }
        result.workloads.insert(id, d);
    }
    result
}

fn subdirs(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

fn managed(root: &Path, cfg: &DiscoveryConfig, out: &mut BTreeMap<String, Discovered>) {
    for name in subdirs(&cfg.managed_root.under(root)) {
        let Ok(cgroup) = cfg.managed_root.join(&name) else {
            continue;
        };
        out.entry(format!("managed/{name}")).or_insert(Discovered {
            id: format!("managed/{name}"),
            kind: WorkloadKind::Managed,
            cgroup,
            k8s_qos: None,
        });
    }
}

/// Recognises a pod directory name; returns the pod uid.
pub fn pod_uid(name: &str) -> Option<String> {
    // cgroupfs driver: pod<uid>; systemd driver: kubepods[-<qos>]-pod<uid_with_underscores>.slice
    let raw = if let Some(rest) = name.strip_suffix(".slice") {
        rest.rsplit_once("-pod")?.1
    } else {
        name.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-");
    let ok = !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then_some(uid)
}

/// The QoS class of a pod by the directory holding it.
fn qos_of(parent: &str) -> &'static str {
    if parent.contains("besteffort") {
        "besteffort"
    } else if parent.contains("burstable") {
        "burstable"
    } else {
        "guaranteed"
    }
}

fn kubepods(root: &Path, kroot: &str, out: &mut BTreeMap<String, Discovered>) {
    let Ok(base) = CgroupPath::new(kroot) else {
        return;
    };
    let mut parents = vec![base.clone()];
    for child in subdirs(&base.under(root)) {
        if pod_uid(&child).is_none()
            && (child.contains("burstable") || child.contains("besteffort"))
            && let Ok(p) = base.join(&child)
        {
            parents.push(p);
        }
    }
    for parent in parents {
        for child in subdirs(&parent.under(root)) {
            let Some(uid) = pod_uid(&child) else { continue };
            let Ok(cgroup) = parent.join(&child) else {
                continue;
            };
            let id = format!("k8s/{uid}");
            out.entry(id.clone()).or_insert(Discovered {
                id,
                kind: WorkloadKind::KubernetesPod,
                cgroup,
                k8s_qos: Some(qos_of(parent.name()).to_string()),
            });
        }
    }
}

fn systemd(
    root: &Path,
    dir: &CgroupPath,
    cfg: &DiscoveryConfig,
    depth: usize,
    out: &mut BTreeMap<String, Discovered>,
) {
    if depth >= MAX_DEPTH {
        return;
    }
    for name in subdirs(&dir.under(root)) {
        let Ok(cg) = dir.join(&name) else { continue };
        if cg.starts_with(&cfg.managed_root)
            || cfg.kubepods_roots.iter().any(|k| k == &name)
            || name.starts_with("kubepods")
        {
            continue;
        }
        let Some((_, unit_type)) = name.rsplit_once('.') else {
            continue;
        };
        if !matches!(
            unit_type,
            "slice" | "service" | "scope" | "socket" | "mount" | "swap"
        ) {
            continue;
        }
        if cfg.systemd_unit_types.iter().any(|t| t == unit_type) {
            let id = format!("systemd/{name}");
            out.entry(id.clone()).or_insert(Discovered {
                id,
                kind: WorkloadKind::SystemdUnit,
                cgroup: cg.clone(),
                k8s_qos: None,
            });
        }
        if unit_type == "slice" {
            systemd(root, &cg, cfg, depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DiscoveryConfig {
        DiscoveryConfig {
            managed_root: CgroupPath::new("daros").unwrap(),
            kubernetes: true,
            kubepods_roots: vec!["kubepods.slice".into(), "kubepods".into()],
            systemd: true,
            systemd_unit_types: vec!["service".into(), "slice".into()],
            max_workloads: 100,
        }
    }

    fn tree(dirs: &[&str]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for d in dirs {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        t
    }

    #[test]
    fn pod_names() {
        assert_eq!(
            pod_uid("pod0f1e2d3c-aaaa-bbbb-cccc-000000000001").as_deref(),
            Some("0f1e2d3c-aaaa-bbbb-cccc-000000000001")
        );
        assert_eq!(
            pod_uid("kubepods-burstable-pod0f1e2d3c_aaaa_bbbb_cccc_000000000001.slice").as_deref(),
            Some("0f1e2d3c-aaaa-bbbb-cccc-000000000001")
        );
        assert_eq!(pod_uid("kubepods-burstable.slice"), None);
        assert_eq!(pod_uid("system.slice"), None);
        assert_eq!(pod_uid("podnothex!"), None);
    }

    #[test]
    fn finds_every_kind_in_a_systemd_tree() {
        let t = tree(&[
            "daros/web",
            "daros/db",
            "system.slice/sshd.service",
            "system.slice/containerd.service",
            "user.slice/user-1000.slice/session-2.scope",
            "init.scope",
            "kubepods.slice/kubepods-podaaaa_1111.slice/cri-containerd-abc.scope",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podbbbb_2222.slice",
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podcccc_3333.slice",
            "process_api/xyz",
        ]);
        let r = discover(&[t.path().to_path_buf()], &cfg());
        let ids: Vec<&str> = r.workloads.keys().map(String::as_str).collect();
        assert_eq!(
            ids,
            vec![
                "k8s/aaaa-1111",
                "k8s/bbbb-2222",
                "k8s/cccc-3333",
                "managed/db",
                "managed/web",
                "systemd/containerd.service",
                "systemd/sshd.service",
                "systemd/system.slice",
                "systemd/user-1000.slice",
                "systemd/user.slice",
            ]
        );
        let pod = &r.workloads["k8s/bbbb-2222"];
        assert_eq!(pod.k8s_qos.as_deref(), Some("burstable"));
        assert_eq!(
            pod.cgroup.as_str(),
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podbbbb_2222.slice"
        );
        assert_eq!(
            r.workloads["k8s/aaaa-1111"].k8s_qos.as_deref(),
            Some("guaranteed")
        );
        assert_eq!(r.workloads["managed/web"].kind, WorkloadKind::Managed);
    }

    #[test]
    fn cgroupfs_driver_layout_and_union_over_hierarchies() {
        let memory = tree(&["kubepods/burstable/pod1234-abcd", "kubepods/pod9999"]);
        let cpu = tree(&["kubepods/besteffort/pod5555", "daros/only-cpu"]);
        let r = discover(
            &[memory.path().to_path_buf(), cpu.path().to_path_buf()],
            &cfg(),
        );
        let ids: Vec<&str> = r.workloads.keys().map(String::as_str).collect();
        assert_eq!(
            ids,
            vec!["k8s/1234-abcd", "k8s/5555", "k8s/9999", "managed/only-cpu"]
        );
        assert_eq!(
            r.workloads["k8s/5555"].k8s_qos.as_deref(),
            Some("besteffort")
        );
    }

    #[test]
    fn switches_and_cap() {
        let t = tree(&[
            "daros/a",
            "daros/b",
            "daros/c",
            "system.slice/x.service",
            "kubepods/pod1",
        ]);
        let mut c = cfg();
        c.kubernetes = false;
        c.systemd = false;
        c.max_workloads = 2;
        let r = discover(&[t.path().to_path_buf()], &c);
        assert_eq!(r.workloads.len(), 2);
        assert_eq!(r.truncated, 1);
        assert!(r.workloads.keys().all(|k| k.starts_with("managed/")));
    }
}
