//! Each instance's own cgroup under the managed root (in every hierarchy; on a
//! hybrid host also in the cgroup2 mount where eBPF attaches), put under its
//! QoS class through the QoS service: node admission of its reservation
//! happens there, and a refusal is a typed failure with the numbers, never a
//! start without the floor.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use daros_coordinator::model::failure::Failure;
use daros_coordinator::{QosClass, ResourceProfile};

use super::target::Subject;
use crate::cgroup::{CgroupBackend, CgroupPath, ManagedRoot};
use crate::qos::{QosError, QosService, QosSpec, SetTarget};

/// Policy name of a refused reservation in failures.
pub const ADMISSION_POLICY: &str = "node-admission";

/// Creates, classes and removes the instances' cgroups.
#[derive(Debug, Clone)]
pub struct InstanceCgroups {
    root: Option<ManagedRoot>,
    qos: Option<Arc<QosService>>,
}

fn joined(errs: &[daros_coordinator::FieldError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl InstanceCgroups {
    /// Over `root` (none: nothing can run) and `qos` (none: enforcement is off,
    /// cgroups are still created so that every instance is contained).
    pub fn new(root: Option<ManagedRoot>, qos: Option<Arc<QosService>>) -> Self {
        Self { root, qos }
    }

    /// The QoS service, when enforcement is on.
    pub fn qos(&self) -> Option<&Arc<QosService>> {
        self.qos.as_ref()
    }

    fn root(&self) -> Result<&ManagedRoot, Failure> {
        self.root.as_ref().ok_or_else(|| Failure::ControlPlane {
            detail: "the managed cgroup root could not be created on this node: no instance can be contained".into(),
        })
    }

    /// The cgroup of `subject`.
    pub fn path(&self, subject: &Subject) -> Result<CgroupPath, Failure> {
        self.root()?
            .workload(&subject.cgroup_name())
            .map_err(|e| Failure::ControlPlane {
                detail: e.to_string(),
            })
    }

    /// Creates the cgroup of `subject` and puts it under `class` with `profile`;
    /// returns its directories (one per hierarchy). Blocking (cgroupfs, redb).
    pub fn prepare(
        &self,
        subject: &Subject,
        class: QosClass,
        profile: ResourceProfile,
    ) -> Result<Vec<PathBuf>, Failure> {
        let root = self.root()?;
        let name = subject.cgroup_name();
        match &self.qos {
            Some(q) => self.set_class(
                q,
                &subject.qos_id(),
                SetTarget::Managed(name.clone()),
                class,
                profile,
            )?,
            None => {
                root.create_workload(&name)
                    .map_err(|e| Failure::ControlPlane {
                        detail: e.to_string(),
                    })?;
            }
        }
        let cg = self.path(subject)?;
        Ok(root
            .backend()
            .dirs(&cg)
            .into_iter()
            .map(|d| d.path)
            .filter(|p| p.is_dir())
            .collect())
    }

    fn set_class(
        &self,
        q: &QosService,
        id: &str,
        target: SetTarget,
        class: QosClass,
        profile: ResourceProfile,
    ) -> Result<(), Failure> {
        let spec =
            QosSpec::new(class, profile, "resources").map_err(|errs| Failure::PolicyViolation {
                policy: "qos".into(),
                detail: joined(&errs),
            })?;
        q.set(id, target, spec).map_err(|e| match e {
            QosError::Refused(a) => Failure::PolicyViolation {
                policy: ADMISSION_POLICY.into(),
                detail: format!("reservation of {class} refused by the node: {a}"),
            },
            QosError::Invalid(errs) => Failure::PolicyViolation {
                policy: "qos".into(),
                detail: joined(&errs),
            },
            other => Failure::ControlPlane {
                detail: format!("putting the cgroup under {class}: {other}"),
            },
        })?;
        Ok(())
    }

    /// Puts the pod of `subject` (its cgroup `cg`, where the kubelet made it)
    /// under `class`: admission of its reservation happens here, as for a
    /// process instance. No-op without enforcement. Blocking.
    pub fn class_pod(
        &self,
        subject: &Subject,
        cg: CgroupPath,
        class: QosClass,
        profile: ResourceProfile,
    ) -> Result<(), Failure> {
        match &self.qos {
            Some(q) => self.set_class(
                q,
                &subject.pod_qos_id(),
                SetTarget::Discovered(cg),
                class,
                profile,
            ),
            None => Ok(()),
        }
    }

    /// The cgroup backend (none without a managed root).
    pub fn backend(&self) -> Option<&crate::cgroup::AnyBackend> {
        self.root.as_ref().map(ManagedRoot::backend)
    }

    /// True when `subject` is under its class (always true without enforcement).
    pub fn classed(&self, subject: &Subject) -> bool {
        self.qos.as_ref().is_none_or(|q| {
            q.get(&subject.qos_id()).is_some() || q.get(&subject.pod_qos_id()).is_some()
        })
    }

    /// Processes the kernel's OOM killer ended in the cgroup of `subject` so
    /// far (`None`: no memory accounting readable here). Blocking.
    pub fn oom_kills(&self, subject: &Subject) -> Option<u64> {
        let (root, cg) = (self.root().ok()?, self.path(subject).ok()?);
        let mut r = root
            .backend()
            .open_stats(&cg, crate::cgroup::fs::OpenMode::Reopen)
            .ok()?;
        let mut stats = crate::cgroup::stats::CgroupStats::default();
        r.read(&mut Vec::new(), &mut stats).ok()?;
        stats.memory?.events.oom_kill
    }

    /// Pids still in the cgroup of `subject`.
    pub fn pids(&self, subject: &Subject) -> Vec<u32> {
        let (Ok(root), Ok(cg)) = (self.root(), self.path(subject)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for d in root.backend().dirs(&cg) {
            if let Ok(t) = std::fs::read_to_string(d.path.join("cgroup.procs")) {
                out.extend(t.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Releases the class and reservation of `subject` and removes its cgroup
    /// from every hierarchy, waiting up to `wait` for exiting processes to
    /// leave it. Blocking.
    pub fn release(&self, subject: &Subject, wait: Duration) -> Result<(), String> {
        if let Some(q) = &self.qos {
            for id in [subject.qos_id(), subject.pod_qos_id()] {
                match q.unset(&id) {
                    Ok(r) if !r.errors.is_empty() => {
                        tracing::warn!(workload = %subject, errors = ?r.errors, "restoring defaults");
                    }
                    Ok(_) | Err(QosError::NotFound(_)) => {}
                    Err(e) => return Err(format!("releasing the class of {subject}: {e}")),
                }
            }
        }
        let Ok(root) = self.root() else {
            return Ok(());
        };
        let name = subject.cgroup_name();
        let deadline = Instant::now() + wait;
        loop {
            match root.remove_workload(&name) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!(
                        "removing the cgroup of {subject} (pids still in it: {:?}): {e}",
                        self.pids(subject)
                    ));
                }
                Err(_) => {
                    for pid in self.pids(subject) {
                        // Anything left in a cgroup being removed is killed: the
                        // instance is no longer desired (its runtime stopped it already).
                        if let Some(p) =
                            rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(0))
                        {
                            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}
