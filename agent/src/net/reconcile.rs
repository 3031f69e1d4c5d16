//! The reconcile thread: makes the datapath follow the workloads. Every
//! `[net] reconcile_interval` it lists the managed workloads and the QoS class
//! state, attaches the programs to each target's cgroup2 directory (pinned
//! links), registers it with the caps of its class, counts its sub-cgroups as
//! members, hands the floor loop the current set, and removes and detaches what
//! is no longer a target. It also prunes run-queue entries of cgroups that are
//! gone. Nothing is written when nothing changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daros_ebpf::{CgroupId, FloorWorkload, NetDatapath, NetLimits, SchedDatapath};
use tracing::{info, warn};

use super::service::{NetSettings, Registered, Shared, lock};
use super::targets::{Target, targets};
use crate::cgroup::ManagedRoot;
use crate::model::net::NetWorkloadStatus;
use crate::qos::QosService;

/// How often run-queue entries of removed cgroups are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(30);
/// Sub-cgroups counted per workload at most (the index has room for 16384 keys).
const MAX_MEMBERS: usize = 256;
/// Depth of sub-cgroups walked.
const MAX_DEPTH: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Applied {
    cgroup: CgroupId,
    limits: NetLimits,
}

/// The reconcile state.
#[derive(Debug)]
pub struct Reconciler {
    net: Option<Arc<Mutex<NetDatapath>>>,
    sched: Option<SchedDatapath>,
    settings: NetSettings,
    shared: Arc<Shared>,
    floor_tx: Option<Sender<Vec<FloorWorkload>>>,
    qos: Option<Arc<QosService>>,
    managed: Option<ManagedRoot>,
    applied: BTreeMap<String, Applied>,
    errors: BTreeMap<String, String>,
    last_floor: Option<Vec<FloorWorkload>>,
    last_prune: Option<Instant>,
    generation: u64,
}

impl Reconciler {
    /// A reconciler over the opened parts.
    pub fn new(
        net: Option<Arc<Mutex<NetDatapath>>>,
        sched: Option<SchedDatapath>,
        settings: NetSettings,
        shared: Arc<Shared>,
        floor_tx: Option<Sender<Vec<FloorWorkload>>>,
        qos: Option<Arc<QosService>>,
        managed: Option<ManagedRoot>,
    ) -> Self {
        Reconciler {
            net,
            sched,
            settings,
            shared,
            floor_tx,
            qos,
            managed,
            applied: BTreeMap::new(),
            errors: BTreeMap::new(),
            last_floor: None,
            last_prune: None,
            generation: 0,
        }
    }

    /// Reconciles every interval until `stop` receives or closes.
    pub fn run(mut self, stop: Receiver<()>) {
        loop {
            self.tick();
            match stop.recv_timeout(self.settings.reconcile_interval) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    fn cgroup2(&self) -> Option<&Path> {
        self.settings.cgroup2.as_deref()
    }

    /// Names of the workloads under the managed root.
    fn managed_names(&self) -> Vec<String> {
        if let Some(m) = &self.managed {
            return m.workloads().unwrap_or_default();
        }
        let Some(root) = self.cgroup2() else {
            return Vec::new();
        };
        let dir = self.settings.managed_root.under(root);
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// One pass.
    pub fn tick(&mut self) {
        let names = self.managed_names();
        let classes = self
            .qos
            .as_ref()
            .map(|q| q.class_state())
            .unwrap_or_default();
        let targets = targets(&self.settings.managed_root, &names, &classes);
        match self.net.clone() {
            Some(net) => self.apply(&net, &targets),
            None => {
                let statuses = targets
                    .iter()
                    .map(|t| {
                        let mut st = status_of(t, self.cgroup2());
                        st.error = Some("the network datapath is unavailable".into());
                        (t.workload.clone(), st)
                    })
                    .collect();
                self.shared.publish(Registered {
                    generation: 0,
                    workloads: statuses,
                    by_cgroup: HashMap::new(),
                });
            }
        }
        self.prune_sched();
    }

    fn note_error(&mut self, workload: &str, error: &str) {
        if self.errors.get(workload).map(String::as_str) != Some(error) {
            warn!(workload, error, "network datapath: not in force");
            self.errors.insert(workload.to_string(), error.to_string());
        }
    }

    fn apply(&mut self, net: &Arc<Mutex<NetDatapath>>, targets: &[Target]) {
        let Some(root) = self.cgroup2().map(Path::to_path_buf) else {
            return;
        };
        let mut guard = lock(net);
        let attached = guard.attachments().unwrap_or_default();
        let mut statuses = BTreeMap::new();
        let mut want: BTreeSet<CgroupId> = BTreeSet::new();
        let mut by_cgroup = HashMap::new();
        let mut floor = Vec::new();
        let mut changed = false;
        for t in targets {
            let path = t.cgroup.under(&root);
            let mut st = status_of(t, Some(&root));
            let id = match CgroupId::of_path(&path) {
                Ok(id) => id,
                Err(e) => {
                    let reason = format!(
                        "no cgroup2 directory for it ({e}); the datapath attaches to cgroup2 directories"
                    );
                    self.note_error(&t.workload, &reason);
                    st.error = Some(reason);
                    statuses.insert(t.workload.clone(), st);
                    continue;
                }
            };
            st.cgroup_id = Some(id.0);
            want.insert(id);
            if !attached.contains(&id)
                && let Err(e) = guard.attach(&path)
            {
                let reason = format!("attaching to {}: {e}", path.display());
                self.note_error(&t.workload, &reason);
                st.error = Some(reason);
                statuses.insert(t.workload.clone(), st);
                continue;
            }
            let previous = self.applied.get(&t.workload).copied();
            let wanted = Applied {
                cgroup: id,
                limits: t.limits,
            };
            if previous != Some(wanted) {
                if let Err(e) = guard.set_workload(id, &t.limits) {
                    let reason = format!("registering cgroup {id}: {e}");
                    self.note_error(&t.workload, &reason);
                    st.error = Some(reason);
                    statuses.insert(t.workload.clone(), st);
                    continue;
                }
                changed |= previous.is_none_or(|p| p.cgroup != id);
                info!(
                    workload = %t.workload,
                    cgroup = %id,
                    egress_limit = ?t.limits.egress.map(|c| c.rate_bps),
                    ingress_limit = ?t.limits.ingress.map(|c| c.rate_bps),
                    "network datapath: workload counted"
                );
                self.applied.insert(t.workload.clone(), wanted);
            }
            let members = subtree(&path);
            let current: BTreeSet<CgroupId> = guard
                .reader()
                .workload(id)
                .map(|w| w.members.into_iter().collect())
                .unwrap_or_default();
            for m in members.difference(&current) {
                match guard.add_member(id, *m) {
                    Ok(()) => changed = true,
                    Err(e) => {
                        let reason = format!("sub-cgroup {m} not counted: {e}");
                        self.note_error(&t.workload, &reason);
                        st.error = Some(reason);
                    }
                }
            }
            for m in current.difference(&members) {
                if guard.remove_member(*m).unwrap_or(false) {
                    changed = true;
                }
            }
            if st.error.is_none() && self.errors.remove(&t.workload).is_some() {
                info!(workload = %t.workload, "network datapath: in force again");
            }
            st.attached = true;
            st.members = members.len();
            by_cgroup.insert(id.0, t.workload.clone());
            for m in &members {
                by_cgroup.insert(m.0, t.workload.clone());
            }
            floor.push(FloorWorkload {
                cgroup: id,
                class: t.net_class(),
                egress_floor_bps: t.egress_floor,
                ingress_floor_bps: t.ingress_floor,
            });
            statuses.insert(t.workload.clone(), st);
        }

        // What is no longer a target: unregister, then detach.
        match guard.reader().workloads() {
            Ok(registered) => {
                for w in registered.iter().filter(|w| !want.contains(&w.cgroup)) {
                    match guard.remove_workload(w.cgroup) {
                        Ok(_) => {
                            changed = true;
                            info!(cgroup = %w.cgroup, "network datapath: workload no longer counted");
                        }
                        Err(e) => {
                            warn!(cgroup = %w.cgroup, error = %e, "cannot unregister workload")
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot list registered workloads"),
        }
        for a in guard.attachments().unwrap_or_default() {
            if !want.contains(&a) {
                match guard.detach(a) {
                    Ok(_) => info!(cgroup = %a, "network datapath: detached"),
                    Err(e) => warn!(cgroup = %a, error = %e, "cannot detach"),
                }
            }
        }
        drop(guard);
        self.applied.retain(|_, a| want.contains(&a.cgroup));
        self.errors.retain(|w, _| statuses.contains_key(w));

        if let Some(tx) = &self.floor_tx
            && self.last_floor.as_ref() != Some(&floor)
        {
            if tx.send(floor.clone()).is_err() {
                warn!("the floor loop is gone; floors are not enforced");
            }
            self.last_floor = Some(floor);
        }
        if changed {
            self.generation += 1;
        }
        lock(&self.shared.events).retain(|w| statuses.contains_key(w));
        self.shared.publish(Registered {
            generation: self.generation,
            workloads: statuses,
            by_cgroup,
        });
    }

    fn prune_sched(&mut self) {
        let Some(sched) = &mut self.sched else { return };
        if self.last_prune.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
            return;
        }
        self.last_prune = Some(Instant::now());
        let Some(root) = self.settings.cgroup2.clone() else {
            return;
        };
        let mut live = BTreeSet::new();
        if let Ok(m) = std::fs::metadata(&root) {
            live.insert(m.ino());
        }
        walk(&root, 0, 32, usize::MAX, &mut |ino| {
            live.insert(ino);
        });
        match sched.retain(|id| live.contains(&id.0)) {
            Ok(0) => {}
            Ok(n) => info!(removed = n, "run-queue entries of removed cgroups pruned"),
            Err(e) => warn!(error = %e, "cannot prune run-queue entries"),
        }
    }
}

fn status_of(t: &Target, root: Option<&Path>) -> NetWorkloadStatus {
    NetWorkloadStatus {
        workload: t.workload.clone(),
        cgroup2_path: root
            .map(|r| t.cgroup.under(r))
            .unwrap_or_else(|| PathBuf::from(t.cgroup.to_string()))
            .display()
            .to_string(),
        managed: t.managed,
        class: t.class.map(|c| c.to_string()),
        egress_limit_bytes_per_second: t.limits.egress.map(|c| c.rate_bps),
        ingress_limit_bytes_per_second: t.limits.ingress.map(|c| c.rate_bps),
        egress_floor_bytes_per_second: t.egress_floor,
        ingress_floor_bytes_per_second: t.ingress_floor,
        ..NetWorkloadStatus::default()
    }
}

/// Inode numbers (cgroup ids) of the directories below `dir`.
fn walk(dir: &Path, depth: usize, max_depth: usize, max: usize, f: &mut impl FnMut(u64)) -> usize {
    if depth >= max_depth {
        return 0;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.filter_map(Result::ok) {
        if n >= max {
            break;
        }
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Ok(m) = e.metadata() {
            f(m.ino());
            n += 1;
        }
        n += walk(&e.path(), depth + 1, max_depth, max.saturating_sub(n), f);
    }
    n
}

/// The cgroup ids of the sub-cgroups of `dir`.
pub fn subtree(dir: &Path) -> BTreeSet<CgroupId> {
    let mut out = BTreeSet::new();
    walk(dir, 0, MAX_DEPTH, MAX_MEMBERS, &mut |ino| {
        out.insert(CgroupId(ino));
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtree_lists_nested_directories_by_inode() {
        let t = tempfile::tempdir().unwrap();
        for d in ["a/b/c", "a/d", "e"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        std::fs::write(t.path().join("a/file"), "x").unwrap();
        let ids = subtree(&t.path().join("a"));
        let ino = |p: &str| CgroupId(std::fs::metadata(t.path().join(p)).unwrap().ino());
        let want: BTreeSet<CgroupId> = ["a/b", "a/b/c", "a/d"].into_iter().map(ino).collect();
        assert_eq!(ids, want);
        assert!(subtree(&t.path().join("missing")).is_empty());
    }
}
