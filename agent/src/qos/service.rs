//! The QoS service: the one place that changes which workloads are under which
//! class. It admits floors (atomically with persisting them), plans and applies
//! knobs, propagates floors to the managed root, keeps the protection loop's
//! watch set current, re-applies everything on start and on a timer (drift),
//! and restores what it changed when a class is removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use daros_coordinator::{Bytes, BytesPerSec, FieldError, MilliCpu, QosClass};
use tracing::{info, warn};

use super::admission::{AdmissionError, NodeBudget};
use super::apply::{self, knob_path};
use super::facts::{self, CpuAssignment, NodeFacts};
use super::knob::{Knob, KnobPlan, KnobReport, Resource};
use super::mapping::{self, ChildFloors};
use super::protect::{ProtectConfig, Protector, Shared, Watched, unix_ms};
use super::report::{ClassState, QosOverview, UnsetReport, WorkloadQos};
use super::spec::QosSpec;
use super::store::{Entry, QosStore, StoreError, TargetKind};
use crate::cgroup::{AnyBackend, CgroupBackend, CgroupError, CgroupPath, ManagedRoot, fs, v1, v2};
use crate::sensing::devices::Disk;

/// Runtime settings of the QoS service (from `[qos]`).
#[derive(Debug, Clone)]
pub struct QosSettings {
    /// Run the protection loop.
    pub protection: bool,
    /// Loop settings (cpus and disks are filled in by the service).
    pub protect: ProtectConfig,
    /// CPU kept for the system.
    pub system_reserved_cpu: MilliCpu,
    /// Memory kept for the system.
    pub system_reserved_memory: Bytes,
    /// Read bandwidth offered to IO floors.
    pub io_read_capacity: Option<BytesPerSec>,
    /// Write bandwidth offered to IO floors.
    pub io_write_capacity: Option<BytesPerSec>,
    /// Egress bandwidth offered to network floors.
    pub network_egress_capacity: Option<BytesPerSec>,
    /// Ingress bandwidth offered to network floors.
    pub network_ingress_capacity: Option<BytesPerSec>,
}

impl Default for QosSettings {
    fn default() -> Self {
        QosSettings {
            protection: true,
            protect: ProtectConfig::default(),
            system_reserved_cpu: MilliCpu(250),
            system_reserved_memory: Bytes::from_mib(512),
            io_read_capacity: None,
            io_write_capacity: None,
            network_egress_capacity: None,
            network_ingress_capacity: None,
        }
    }
}

/// Errors of QoS operations, each mapped to an HTTP status by the API.
#[derive(Debug, thiserror::Error)]
pub enum QosError {
    /// Bad input (400).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// No such workload or entry (404).
    #[error("{0}")]
    NotFound(String),
    /// Admission refused the floors (409).
    #[error(transparent)]
    Refused(#[from] AdmissionError),
    /// The request conflicts with the current state (409).
    #[error("{0}")]
    Conflict(String),
    /// A cgroup operation failed (500).
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The state store failed (500).
    #[error("{0}")]
    Store(String),
}

impl From<StoreError> for QosError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Refused(a) => QosError::Refused(a),
            other => QosError::Store(other.to_string()),
        }
    }
}

/// Where `PUT` applies a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetTarget {
    /// `managed/<name>`: the cgroup under the managed root (created if missing).
    Managed(String),
    /// A discovered cgroup outside the managed root.
    Discovered(CgroupPath),
}

#[derive(Debug, Clone)]
struct Live {
    entry: Entry,
    reports: Vec<KnobReport>,
    applied_at: u64,
}

#[derive(Debug)]
struct State {
    node: NodeFacts,
    /// Read and write bandwidth offered to IO floors (`[qos]`, or the
    /// measured iocost model; a new measurement replaces it).
    io_capacity: (Option<BytesPerSec>, Option<BytesPerSec>),
    entries: BTreeMap<String, Live>,
    root_reports: Vec<KnobReport>,
    notes: Vec<String>,
}

/// The QoS service.
#[derive(Debug)]
pub struct QosService {
    root: ManagedRoot,
    store: QosStore,
    settings: QosSettings,
    disks: Vec<Disk>,
    state: Mutex<State>,
    shared: Arc<Shared>,
    protector: Mutex<Option<Protector>>,
}

/// Name of the store file in the data directory.
pub const STORE_FILE: &str = "qos.redb";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl QosService {
    /// Opens the store in `data_dir`, re-applies every stored class and starts
    /// the protection loop (when enabled).
    pub fn open(
        settings: QosSettings,
        root: ManagedRoot,
        data_dir: &Path,
        disks: Vec<Disk>,
    ) -> Result<Arc<Self>, QosError> {
        let store = QosStore::open(&data_dir.join(STORE_FILE))?;
        let (entries, notes) = store.load()?;
        for n in &notes {
            warn!(note = %n, "QoS store");
        }
        let node = facts::probe_node(root.backend(), &disks, settings.protection);
        let io_capacity = (settings.io_read_capacity, settings.io_write_capacity);
        let svc = Arc::new(QosService {
            root,
            store,
            settings,
            disks,
            state: Mutex::new(State {
                node,
                io_capacity,
                entries: entries
                    .into_iter()
                    .map(|e| {
                        (
                            e.id.clone(),
                            Live {
                                entry: e,
                                reports: Vec::new(),
                                applied_at: 0,
                            },
                        )
                    })
                    .collect(),
                root_reports: Vec::new(),
                notes,
            }),
            shared: Arc::new(Shared::default()),
            protector: Mutex::new(None),
        });
        {
            let mut st = lock(&svc.state);
            svc.apply_all(&mut st, true);
            svc.publish_watch(&st);
        }
        if svc.settings.protection {
            let st = lock(&svc.state);
            let mut cfg = svc.settings.protect.clone();
            cfg.cpus = u32::try_from(st.node.cpus.len()).unwrap_or(1).max(1);
            cfg.disks = svc.disk_ids();
            drop(st);
            match Protector::spawn(svc.root.backend().clone(), cfg, Arc::clone(&svc.shared)) {
                Ok(p) => *lock(&svc.protector) = Some(p),
                Err(e) => svc.shared.update_status(|s| {
                    s.notes
                        .push(format!("cannot start the protection loop: {e}"))
                }),
            }
        } else {
            svc.shared.update_status(|s| {
                s.notes
                    .push("protection loop off ([qos] protection = false)".into());
            });
        }
        Ok(svc)
    }

    /// Stops the protection loop (releasing its holds).
    pub fn shutdown(&self) {
        if let Some(p) = lock(&self.protector).take() {
            p.stop();
        }
    }

    /// The state shared with the protection loop (events, counters, status).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The managed root.
    pub fn managed_root(&self) -> &CgroupPath {
        self.root.path()
    }

    /// The cgroup backend of the managed root (and of every hierarchy).
    pub fn backend(&self) -> &AnyBackend {
        self.root.backend()
    }

    fn disk_ids(&self) -> Vec<(u32, u32)> {
        self.disks.iter().map(|d| (d.major, d.minor)).collect()
    }

    fn budget(&self, st: &State) -> NodeBudget {
        let node = &st.node;
        NodeBudget {
            cpu: MilliCpu::from_cores(node.cpus.len() as u64),
            memory: Bytes(node.memory_bytes),
            io_read: st.io_capacity.0,
            io_write: st.io_capacity.1,
            network_egress: self.settings.network_egress_capacity,
            network_ingress: self.settings.network_ingress_capacity,
            reserved_cpu: self.settings.system_reserved_cpu,
            reserved_memory: self.settings.system_reserved_memory,
        }
    }

    /// Puts a workload under `spec`.
    pub fn set(&self, id: &str, target: SetTarget, spec: QosSpec) -> Result<WorkloadQos, QosError> {
        let mut st = lock(&self.state);
        let (cgroup, kind, created) = match &target {
            SetTarget::Managed(name) => {
                let cg = self.root.workload(name).map_err(|e| {
                    QosError::Invalid(vec![FieldError::new("workload", e.to_string())])
                })?;
                let kind = match st.entries.get(id).map(|l| l.entry.kind) {
                    Some(TargetKind::Adopted) => TargetKind::Adopted,
                    _ => TargetKind::Managed,
                };
                let created = !self.exists(&cg);
                if created {
                    self.backend().create(&cg)?;
                }
                (cg, kind, created)
            }
            SetTarget::Discovered(cg) => {
                if cg.starts_with(self.root.path()) {
                    return Err(QosError::Conflict(format!(
                        "{cg} is inside the managed root {}: address it as managed/<name>",
                        self.root.path()
                    )));
                }
                if !self.exists(cg) {
                    return Err(QosError::NotFound(format!(
                        "cgroup {cg} of {id} no longer exists"
                    )));
                }
                (cg.clone(), TargetKind::Discovered, false)
            }
        };
        let previous = st.entries.get(id).map(|l| l.entry.clone());
        let entry = Entry {
            id: id.to_string(),
            cgroup: cgroup.as_str().to_string(),
            kind,
            spec,
            set_at_unix_ms: unix_ms(),
            dedicated: previous
                .as_ref()
                .filter(|p| p.spec.profile.dedicated_cores() == spec.profile.dedicated_cores())
                .map(|p| p.dedicated.clone())
                .unwrap_or_default(),
            originals: previous
                .as_ref()
                .map(|p| p.originals.clone())
                .unwrap_or_default(),
            pids: previous
                .as_ref()
                .map(|p| p.pids.clone())
                .unwrap_or_default(),
        };
        let budget = self.budget(&st);
        if let Err(e) = self.store.admit_and_put(&budget, &entry) {
            if created {
                let _ = self.backend().remove(&cgroup);
            }
            return Err(e.into());
        }
        info!(workload = id, class = %spec.class, "QoS class set");
        st.entries.insert(
            id.to_string(),
            Live {
                entry,
                reports: Vec::new(),
                applied_at: 0,
            },
        );
        // This workload's cgroup exists (created above); others are not recreated here.
        self.apply_all(&mut st, false);
        self.publish_watch(&st);
        self.view(&st, id)
            .ok_or_else(|| QosError::NotFound(id.to_string()))
    }

    /// Creates `managed/<name>`, puts it under `spec` and moves `pids` into it.
    pub fn adopt(&self, name: &str, pids: &[u32], spec: QosSpec) -> Result<WorkloadQos, QosError> {
        let id = format!("managed/{name}");
        let cg = self
            .root
            .workload(name)
            .map_err(|e| QosError::Invalid(vec![FieldError::new("name", e.to_string())]))?;
        if pids.is_empty() {
            return Err(QosError::Invalid(vec![FieldError::new(
                "pids",
                "at least one pid is needed",
            )]));
        }
        for (i, pid) in pids.iter().enumerate() {
            let field = format!("pids[{i}]");
            if *pid == std::process::id() {
                return Err(QosError::Invalid(vec![FieldError::new(
                    field,
                    "refusing to move darosd itself",
                )]));
            }
            if *pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(QosError::Invalid(vec![FieldError::new(
                    field,
                    format!("no process {pid}"),
                )]));
            }
        }
        {
            let st = lock(&self.state);
            if st.entries.contains_key(&id) || self.exists(&cg) {
                return Err(QosError::Conflict(format!(
                    "{id} already exists; set its class with PUT /v1/qos/workloads/{id} and move processes with the runtime"
                )));
            }
        }
        self.set(&id, SetTarget::Managed(name.to_string()), spec)?;
        let mut moved = Vec::new();
        for pid in pids {
            if let Err(e) = self.backend().add_pid(&cg, *pid) {
                // A pid that cannot be moved (exited, kernel thread) fails the request:
                // the class is removed again; processes already moved stay in the cgroup.
                let _ = self.unset(&id);
                return Err(QosError::Invalid(vec![FieldError::new(
                    "pids",
                    format!("moving {pid}: {e}"),
                )]));
            }
            moved.push(*pid);
        }
        let mut st = lock(&self.state);
        if let Some(l) = st.entries.get_mut(&id) {
            l.entry.kind = TargetKind::Adopted;
            l.entry.pids = moved;
            self.store.put(&l.entry)?;
        }
        self.view(&st, &id).ok_or(QosError::NotFound(id))
    }

    /// Removes the class of `id`: a discovered cgroup gets its original values
    /// back and becomes observed-only; a managed one gets the defaults of a new cgroup.
    pub fn unset(&self, id: &str) -> Result<UnsetReport, QosError> {
        let mut st = lock(&self.state);
        let Some(live) = st.entries.remove(id) else {
            return Err(QosError::NotFound(format!(
                "{id} is not under a QoS class; list them with GET /v1/qos"
            )));
        };
        if let Err(e) = self.store.remove(id) {
            st.entries.insert(id.to_string(), live);
            return Err(e.into());
        }
        let disks = self.disk_ids();
        let mut restored = Vec::new();
        let mut errors = Vec::new();
        match live.entry.kind {
            TargetKind::Discovered => {
                errors.extend(apply::restore(&live.entry.originals, &disks));
                restored.extend(
                    live.entry
                        .originals
                        .iter()
                        .map(|o| format!("{} = {:?}", o.path.display(), o.content.trim())),
                );
            }
            TargetKind::Managed | TargetKind::Adopted => {
                let cg = CgroupPath::new(&live.entry.cgroup)?;
                let parent_cpus =
                    facts::parent_cpus(self.backend(), self.root.path()).unwrap_or_default();
                let knobs: BTreeSet<Knob> = self
                    .plans_for(&st, &live.entry)
                    .iter()
                    .map(|p| p.knob)
                    .collect();
                for k in knobs {
                    let (Some(values), Some(path)) = (
                        apply::default_values(k, &disks, &parent_cpus),
                        knob_path(self.backend(), &cg, k),
                    ) else {
                        continue;
                    };
                    match apply::write_values(&path, &values) {
                        Ok(()) => {
                            restored.push(format!("{} = {:?}", path.display(), values.join("; ")))
                        }
                        Err(e) if !path.exists() => {
                            let _ = e;
                        }
                        Err(e) => errors.push(format!("{}: {e}", path.display())),
                    }
                }
            }
        }
        info!(workload = id, "QoS class removed");
        self.apply_all(&mut st, false);
        self.publish_watch(&st);
        Ok(UnsetReport {
            workload: id.to_string(),
            restored,
            errors,
        })
    }

    /// One workload's state.
    pub fn get(&self, id: &str) -> Option<WorkloadQos> {
        let st = lock(&self.state);
        self.view(&st, id)
    }

    /// Everything.
    pub fn overview(&self) -> QosOverview {
        let st = lock(&self.state);
        let budget = self.budget(&st);
        let reservations: Vec<_> = st
            .entries
            .values()
            .map(|l| l.entry.spec.reservation())
            .collect();
        QosOverview {
            enabled: true,
            mode: st.node.mode,
            managed_root: self.root.path().to_string(),
            admission: budget.accounts(reservations.iter()),
            managed_root_knobs: st.root_reports.clone(),
            protection: self.shared.status(),
            workloads: st
                .entries
                .keys()
                .filter_map(|id| self.view(&st, id))
                .collect(),
            notes: st.notes.clone(),
        }
    }

    /// Class and floors of every workload under a class (for the network floor
    /// controller and other consumers).
    pub fn class_state(&self) -> Vec<ClassState> {
        let st = lock(&self.state);
        st.entries
            .values()
            .map(|l| ClassState {
                workload: l.entry.id.clone(),
                cgroup: l.entry.cgroup.clone(),
                class: l.entry.spec.class,
                reservation: l.entry.spec.reservation(),
                profile: l.entry.spec.profile,
            })
            .collect()
    }

    /// New IO floor capacity (the disk measured again): later admissions
    /// are judged against it; classes already admitted keep their floors.
    pub fn set_io_capacity(&self, read: Option<BytesPerSec>, write: Option<BytesPerSec>) {
        let mut st = lock(&self.state);
        if let Some(r) = read {
            st.io_capacity.0 = Some(r);
        }
        if let Some(w) = write {
            st.io_capacity.1 = Some(w);
        }
    }

    /// What the eBPF datapath enforces (it starts after this service): the
    /// network knobs of every class are reported anew.
    pub fn set_network(&self, network: facts::NetworkFacts) {
        let mut st = lock(&self.state);
        if st.node.network == network {
            return;
        }
        st.node.network = network;
        self.apply_all(&mut st, false);
        self.publish_watch(&st);
    }

    /// Re-probes the node and re-applies every class (drift correction). A
    /// managed cgroup that disappeared (its runtime removed it) is not recreated
    /// here: the class applies again when it reappears.
    pub fn reconcile(&self) {
        let mut st = lock(&self.state);
        let network = st.node.network.clone();
        st.node = facts::probe_node(self.backend(), &self.disks, self.settings.protection);
        st.node.network = network;
        self.apply_all(&mut st, false);
        self.publish_watch(&st);
    }

    fn exists(&self, cg: &CgroupPath) -> bool {
        self.backend()
            .primary()
            .is_some_and(|p| cg.under(p).is_dir())
    }

    fn view(&self, st: &State, id: &str) -> Option<WorkloadQos> {
        let l = st.entries.get(id)?;
        let (enforced, degraded) = WorkloadQos::count(&l.reports);
        let holds = self
            .shared
            .status()
            .holds
            .into_iter()
            .filter(|h| h.workload == id)
            .collect();
        Some(WorkloadQos {
            workload: id.to_string(),
            cgroup: format!("/{}", l.entry.cgroup),
            kind: l.entry.kind,
            class: l.entry.spec.class,
            profile: l.entry.spec.profile,
            reservation: l.entry.spec.reservation(),
            set_at_unix_ms: l.entry.set_at_unix_ms,
            applied_at_unix_ms: l.applied_at,
            enforced,
            degraded,
            knobs: l.reports.clone(),
            holds,
            dedicated_cpus: (!l.entry.dedicated.is_empty())
                .then(|| v2::cpuset::format_list(&l.entry.dedicated)),
            pids: l.entry.pids.clone(),
        })
    }

    /// Floors of the whole managed subtree.
    fn subtree_floors(st: &State, root: &CgroupPath) -> Vec<ChildFloors> {
        st.entries
            .values()
            .filter(|l| l.entry.kind != TargetKind::Discovered)
            .filter(|l| CgroupPath::new(&l.entry.cgroup).is_ok_and(|c| c.starts_with(root)))
            .map(|l| {
                let s = &l.entry.spec;
                let r = s.reservation();
                ChildFloors {
                    memory_min: r.memory.map_or(0, Bytes::get),
                    memory_low: match s.class {
                        QosClass::BestEffort => 0,
                        _ => s.profile.memory.request.map_or(0, Bytes::get),
                    },
                    cpu: r.cpu.unwrap_or(MilliCpu::ZERO),
                }
            })
            .collect()
    }

    fn cpu_assignment(&self, st: &State, entry: &Entry) -> CpuAssignment {
        let parent = facts::parent_cpus(self.backend(), self.root.path())
            .unwrap_or_else(|| st.node.cpus.clone());
        let taken: BTreeSet<u32> = st
            .entries
            .values()
            .filter(|l| l.entry.id != entry.id)
            .flat_map(|l| l.entry.dedicated.iter().copied())
            .collect();
        match entry.spec.profile.dedicated_cores() {
            Some(n) if !entry.dedicated.is_empty() && entry.dedicated.len() as u64 == n => {
                CpuAssignment::Dedicated(Ok(entry.dedicated.clone()))
            }
            Some(n) => CpuAssignment::Dedicated(mapping::pick_cores(&parent, &taken, n)),
            None if taken.is_empty() => CpuAssignment::Inherit(parent),
            None => CpuAssignment::Pool(parent.difference(&taken).copied().collect()),
        }
    }

    fn plans_for(&self, st: &State, entry: &Entry) -> Vec<KnobPlan> {
        let Ok(cg) = CgroupPath::new(&entry.cgroup) else {
            return Vec::new();
        };
        let floors = Self::subtree_floors(st, self.root.path());
        let (outside_from, smin, slow) = match entry.kind {
            TargetKind::Discovered => {
                let r = entry.spec.reservation();
                (
                    cg.clone(),
                    r.memory.map_or(0, Bytes::get),
                    entry.spec.profile.memory.request.map_or(0, Bytes::get),
                )
            }
            _ => (
                self.root.path().clone(),
                floors.iter().map(|f| f.memory_min).sum(),
                floors.iter().map(|f| f.memory_low).sum(),
            ),
        };
        let cpus = self.cpu_assignment(st, entry);
        let target = facts::probe_target(self.backend(), &cg, &outside_from, smin, slow, cpus);
        mapping::plan(&entry.spec, &st.node, &target)
    }

    /// Applies every entry and the managed root's floors; `create` recreates
    /// missing managed cgroups (on start, e.g. after a reboot).
    fn apply_all(&self, st: &mut State, create: bool) {
        let page = st.node.page_size;
        let held: BTreeMap<String, BTreeSet<Resource>> = self
            .shared
            .status()
            .holds
            .into_iter()
            .fold(BTreeMap::new(), |mut m, h| {
                m.entry(h.workload).or_default().insert(h.resource);
                m
            });
        let ids: Vec<String> = st.entries.keys().cloned().collect();
        for id in ids {
            let Some(mut entry) = st.entries.get(&id).map(|l| l.entry.clone()) else {
                continue;
            };
            let Ok(cg) = CgroupPath::new(&entry.cgroup) else {
                continue;
            };
            if !self.exists(&cg) {
                if entry.kind == TargetKind::Discovered || !create {
                    let reason =
                        format!("cgroup {cg} not found; the class applies again when it reappears");
                    let reports = self
                        .plans_for(st, &entry)
                        .iter()
                        .map(|p| KnobReport::degraded(p, None, reason.clone()))
                        .collect();
                    if let Some(l) = st.entries.get_mut(&id) {
                        l.reports = reports;
                        l.applied_at = unix_ms();
                    }
                    continue;
                }
                if let Err(e) = self.backend().create(&cg) {
                    warn!(workload = %id, error = %e, "cannot recreate managed cgroup");
                    continue;
                }
            }
            // Keep the dedicated cores stable once assigned.
            if let CpuAssignment::Dedicated(Ok(set)) = self.cpu_assignment(st, &entry)
                && entry.dedicated != set
            {
                entry.dedicated = set;
            }
            let plans = self.plans_for(st, &entry);
            if entry.kind == TargetKind::Discovered {
                let before = entry.originals.len();
                apply::capture_originals(self.backend(), &cg, &plans, &mut entry.originals);
                if entry.originals.len() != before {
                    // Persist the originals before the first write so they survive a crash.
                    if let Err(e) = self.store.put(&entry) {
                        warn!(workload = %id, error = %e, "cannot persist original values; not writing");
                        continue;
                    }
                }
            }
            let stored = st.entries.get(&id).map(|l| l.entry.dedicated.clone());
            if stored.as_ref() != Some(&entry.dedicated)
                && let Err(e) = self.store.put(&entry)
            {
                warn!(workload = %id, error = %e, "cannot persist dedicated cores");
            }
            // Knobs the loop holds stay as they are, unless the class is no longer
            // one the loop holds (the class values then replace the hold).
            let skip = match entry.spec.class {
                QosClass::BestEffort | QosClass::Burstable => {
                    held.get(&id).cloned().unwrap_or_default()
                }
                _ => BTreeSet::new(),
            };
            let (write, keep): (Vec<KnobPlan>, Vec<KnobPlan>) = plans
                .into_iter()
                .partition(|p| !is_hold_knob(p.knob, &skip));
            let mut reports = apply::apply(self.backend(), &cg, &write, page);
            for p in keep {
                let current = knob_path(self.backend(), &cg, p.knob)
                    .and_then(|path| fs::read_string(&path).ok());
                let mut r = KnobReport::enforced(
                    &p,
                    current
                        .map(|c| c.trim().replace('\n', "; "))
                        .unwrap_or_default(),
                );
                r.note = Some(format!(
                    "held by the protection loop; the class value is {:?}",
                    p.values().join("; ")
                ));
                reports.push(r);
            }
            if let Some(l) = st.entries.get_mut(&id) {
                l.entry = entry;
                l.reports = reports;
                l.applied_at = unix_ms();
            }
        }
        st.root_reports = self.apply_root(st);
    }

    /// The managed root's floors: sums of its children (v2), weight sized
    /// against its siblings.
    fn apply_root(&self, st: &State) -> Vec<KnobReport> {
        let root = self.root.path();
        let floors = Self::subtree_floors(st, root);
        let target = facts::probe_target(
            self.backend(),
            root,
            root,
            floors.iter().map(|f| f.memory_min).sum(),
            floors.iter().map(|f| f.memory_low).sum(),
            CpuAssignment::Inherit(BTreeSet::new()),
        );
        let plans = mapping::plan_intermediate(&floors, &st.node, &target, self.sibling_weights());
        apply::apply(self.backend(), root, &plans, st.node.page_size)
    }

    /// Sum of the CPU weights of the managed root's siblings (read, never
    /// written), in cpu.weight units.
    fn sibling_weights(&self) -> u64 {
        let root = self.root.path();
        let parent = root.as_str().rsplit_once('/').map_or("", |(p, _)| p);
        let (dir, file, to_weight): (Option<std::path::PathBuf>, &str, fn(u64) -> u64) =
            match self.backend() {
                AnyBackend::V2(b) => (Some(b.root().join(parent)), v2::cpu::WEIGHT, |w| w),
                AnyBackend::V1(b) => (
                    b.mount("cpu").map(|m| m.join(parent)),
                    v1::cpu::SHARES,
                    |s| s * 100 / 1024,
                ),
            };
        let Some(dir) = dir else { return 0 };
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return 0;
        };
        rd.filter_map(Result::ok)
            .filter(|e| {
                e.file_type().is_ok_and(|t| t.is_dir())
                    && e.file_name().to_str() != Some(root.name())
            })
            .filter_map(|e| fs::read_string(&e.path().join(file)).ok())
            .filter_map(|t| t.trim().parse::<u64>().ok())
            .map(to_weight)
            .sum()
    }

    /// Hands the loop the workloads it watches.
    fn publish_watch(&self, st: &State) {
        let v1 = matches!(self.backend(), AnyBackend::V1(_));
        let page = st.node.page_size;
        let watched = st
            .entries
            .values()
            .filter_map(|l| {
                let s = &l.entry.spec;
                let r = s.reservation();
                let cgroup = CgroupPath::new(&l.entry.cgroup).ok()?;
                self.exists(&cgroup).then_some(())?;
                let rate = |b: Option<BytesPerSec>| b.map_or(0.0, |v| v.get() as f64);
                // Dedicated cores, once its cpuset holds them, are its alone among
                // the managed workloads (the shared pool leaves them out): holding the
                // others adds nothing there, so the loop watches only the rest of its
                // CPU floor — or it would hold them for ever while the cores it runs
                // on are already its own (the isolation benchmark's hog kept 9 %).
                let cpuset_held = l.reports.iter().any(|k| {
                    k.knob == Knob::CpusetCpus.name()
                        && k.status == super::knob::KnobStatus::Enforced
                });
                let dedicated = if cpuset_held {
                    l.entry.dedicated.len() as f64
                } else {
                    0.0
                };
                Some(Watched {
                    id: l.entry.id.clone(),
                    class: s.class,
                    cgroup,
                    floor_cpu: (r.cpu.map_or(0.0, |c| c.millis() as f64 / 1000.0) - dedicated)
                        .max(0.0),
                    floor_memory: r.memory.map_or(0.0, |m| m.get() as f64),
                    floor_io_read: rate(r.io_read),
                    floor_io_write: rate(r.io_write),
                    cpu_limit: s.profile.cpu.limit.map(MilliCpu::millis),
                    cpu_weight: if v1 {
                        mapping::cpu_shares_of(s.class, &s.profile.cpu)
                    } else {
                        mapping::cpu_weight(s.class, &s.profile.cpu)
                    },
                    memory_high: if v1 {
                        s.profile.memory.limit.map(Bytes::get)
                    } else if s.class == QosClass::Burstable {
                        mapping::burstable_memory_high(&s.profile.memory, page)
                    } else {
                        None
                    },
                    memory_bound: match s.class {
                        QosClass::Burstable => s.profile.memory.request.map_or(0, Bytes::get),
                        _ => 0,
                    },
                    io_read_limit: s.profile.io.read.limit.map(BytesPerSec::get),
                    io_write_limit: s.profile.io.write.limit.map(BytesPerSec::get),
                })
            })
            .collect();
        self.shared.set_watch(watched);
    }
}

impl Drop for QosService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Knobs the protection loop writes while it holds a resource.
fn is_hold_knob(k: Knob, held: &BTreeSet<Resource>) -> bool {
    match k {
        Knob::CpuMax
        | Knob::CpuCfsQuota
        | Knob::CpuCfsPeriod
        | Knob::CpuWeight
        | Knob::CpuShares => held.contains(&Resource::Cpu),
        Knob::MemoryHigh | Knob::MemoryLimit => held.contains(&Resource::Memory),
        Knob::IoMax | Knob::BlkioReadBps | Knob::BlkioWriteBps => held.contains(&Resource::Io),
        _ => false,
    }
}

/// The period of the reconcile loop when none is configured.
pub const DEFAULT_RECONCILE: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_hold_keeps_its_quota_and_weight_from_the_reconcile() {
        let cpu: BTreeSet<Resource> = [Resource::Cpu].into();
        for k in [
            Knob::CpuMax,
            Knob::CpuWeight,
            Knob::CpuCfsQuota,
            Knob::CpuCfsPeriod,
            Knob::CpuShares,
        ] {
            assert!(is_hold_knob(k, &cpu), "{k:?}");
            assert!(
                !is_hold_knob(k, &BTreeSet::new()),
                "{k:?} with nothing held"
            );
        }
        assert!(!is_hold_knob(Knob::MemoryHigh, &cpu));
        assert!(!is_hold_knob(Knob::IoMax, &cpu));
    }
}
