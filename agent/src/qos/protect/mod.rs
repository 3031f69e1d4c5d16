//! The protection loop: PSI triggers on the node's and the reserved workloads'
//! pressure files wake it, and a fast sampler measures each reserved workload
//! against its floor every `sample_interval`. When a floor is threatened it
//! holds back BestEffort, then Burstable workloads (cpu.max, memory.high,
//! io.max; on v1 CFS quota, memory limit, blkio throttle) and releases them
//! with hysteresis. Every hold and release is an event (tracing, metrics, API).

pub mod actuator;
pub mod hold_use;
pub mod policy;
pub mod psi;
pub mod reclaim;
pub mod run;
pub mod sampler;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use daros_coordinator::QosClass;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::knob::Resource;
use crate::cgroup::CgroupPath;

pub use run::{ProtectConfig, Protector};

/// A workload the loop watches: reserved ones (GuaranteedPro with a floor) are
/// measured against their floors; BestEffort and Burstable ones may be held.
#[derive(Debug, Clone, PartialEq)]
pub struct Watched {
    /// Workload id.
    pub id: String,
    /// Class.
    pub class: QosClass,
    /// Cgroup.
    pub cgroup: CgroupPath,
    /// CPU floor in cores.
    pub floor_cpu: f64,
    /// Memory floor in bytes.
    pub floor_memory: f64,
    /// Read bandwidth floor in bytes/s.
    pub floor_io_read: f64,
    /// Write bandwidth floor in bytes/s.
    pub floor_io_write: f64,
    /// Static CPU limit in millicores (restored after a hold).
    pub cpu_limit: Option<u64>,
    /// Static CPU weight, `cpu.weight` on v2 and `cpu.shares` on v1 (restored
    /// after a hold, which lowers it to the least).
    pub cpu_weight: u64,
    /// Static memory throttle/limit in bytes (restored after a hold).
    pub memory_high: Option<u64>,
    /// A memory hold never goes below this (a Burstable workload's request).
    pub memory_bound: u64,
    /// Static read limit per device, bytes/s.
    pub io_read_limit: Option<u64>,
    /// Static write limit per device, bytes/s.
    pub io_write_limit: Option<u64>,
}

impl Watched {
    /// True when it carries any floor the loop protects.
    pub fn reserved(&self) -> bool {
        self.class == QosClass::GuaranteedPro
            && (self.floor_cpu > 0.0
                || self.floor_memory > 0.0
                || self.floor_io_read > 0.0
                || self.floor_io_write > 0.0)
    }

    /// True when the loop may hold it back.
    pub fn holdable(&self) -> bool {
        matches!(self.class, QosClass::BestEffort | QosClass::Burstable)
    }

    /// A workload `daros/<id>` of `class` with a memory floor and nothing else.
    #[cfg(test)]
    pub(crate) fn for_test(id: &str, class: QosClass, floor_memory: f64) -> Self {
        Watched {
            id: id.into(),
            class,
            cgroup: CgroupPath::new(&format!("daros/{id}")).unwrap(),
            floor_cpu: 0.0,
            floor_memory,
            floor_io_read: 0.0,
            floor_io_write: 0.0,
            cpu_limit: None,
            cpu_weight: 1,
            memory_high: None,
            memory_bound: 0,
            io_read_limit: None,
            io_write_limit: None,
        }
    }
}

/// The workloads the loop watches, replaced as a whole on every change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchSet {
    /// Increases on every change.
    pub generation: u64,
    /// Workloads.
    pub workloads: Vec<Watched>,
}

/// Kind of protection event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// Holding started.
    Hold,
    /// Holds tightened or widened to Burstable.
    Tighten,
    /// One release step (level 0: all released).
    Release,
    /// A fully eased hold kept while a reserved workload still uses the resource.
    Kept,
    /// The threatened floor is back.
    Restored,
    /// A floor is short and nothing can be held back.
    Short,
}

/// One protection event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProtectionEvent {
    /// When, ms since the Unix epoch.
    pub at_unix_ms: u64,
    /// What happened.
    pub kind: EventKind,
    /// Resource.
    pub resource: Resource,
    /// Hold level after the event.
    pub level: u8,
    /// What was threatened and what was written.
    pub detail: String,
    /// Workloads whose knobs changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
    /// For `restored`: from the first tick that saw the threat to the tick that
    /// saw the floor back, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaction_ms: Option<f64>,
}

/// A knob the loop currently holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HoldView {
    /// Held workload.
    pub workload: String,
    /// Its class.
    pub class: String,
    /// Resource.
    pub resource: Resource,
    /// File written.
    pub knob: String,
    /// Value in effect.
    pub value: String,
    /// Since when, ms since the Unix epoch.
    pub since_unix_ms: u64,
}

/// Upper bounds of the reaction-time histogram, seconds.
pub const REACTION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Loop state readers see (API, metrics).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProtectionStatus {
    /// The loop runs.
    pub running: bool,
    /// Why it does not run, or what it lacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Sampling interval in milliseconds, as configured.
    pub sample_interval_ms: f64,
    /// The interval the loop keeps, milliseconds: the configured one, or longer
    /// where a tick would spend more than the loop's CPU budget.
    #[serde(default)]
    pub interval_ms: f64,
    /// PSI triggers armed.
    pub psi_triggers: Vec<String>,
    /// Hold level per resource (0: none).
    pub levels: BTreeMap<String, u8>,
    /// Knobs currently held.
    pub holds: Vec<HoldView>,
    /// Average CPU time of the loop per tick (thread CPU clock: the tick and
    /// the wait since the previous one), microseconds: the loop's own cost.
    pub tick_cost_us: f64,
}

/// Counters and the reaction histogram.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Holds started, per (resource, class).
    pub holds: BTreeMap<(String, String), u64>,
    /// Release steps, per resource.
    pub releases: BTreeMap<String, u64>,
    /// Floors restored, per resource.
    pub restored: BTreeMap<String, u64>,
    /// Reaction histogram: counts per bucket of [`REACTION_BUCKETS`] (non-cumulative) and +Inf.
    pub reaction_buckets: [u64; 13],
    /// Sum of reaction times, seconds.
    pub reaction_sum: f64,
    /// Number of reaction samples.
    pub reaction_count: u64,
}

/// State shared between the QoS service, the loop and readers.
#[derive(Debug, Default)]
pub struct Shared {
    watch: RwLock<Arc<WatchSet>>,
    events: Mutex<VecDeque<ProtectionEvent>>,
    status: RwLock<ProtectionStatus>,
    counters: Mutex<Counters>,
    /// Loop ticks.
    pub ticks: AtomicU64,
    /// Wake-ups by a PSI trigger.
    pub psi_wakeups: AtomicU64,
}

/// Events kept for the API.
pub const EVENT_CAPACITY: usize = 512;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Replaces the watch set (the loop picks it up at its next wake-up). The
    /// same set again is no change: the loop keeps its series (a rebuild
    /// leaves it without rates for a window).
    pub fn set_watch(&self, workloads: Vec<Watched>) {
        let mut g = self
            .watch
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.workloads == workloads {
            return;
        }
        let generation = g.generation + 1;
        *g = Arc::new(WatchSet {
            generation,
            workloads,
        });
    }

    /// The current watch set.
    pub fn watch(&self) -> Arc<WatchSet> {
        Arc::clone(
            &self
                .watch
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Records an event (and counts it).
    pub fn push_event(&self, e: ProtectionEvent, held_classes: &[QosClass]) {
        {
            let mut c = lock(&self.counters);
            let res = e.resource.as_str().to_string();
            match e.kind {
                EventKind::Hold | EventKind::Tighten => {
                    for class in held_classes {
                        *c.holds.entry((res.clone(), class.to_string())).or_default() += 1;
                    }
                }
                EventKind::Release => *c.releases.entry(res).or_default() += 1,
                EventKind::Restored => {
                    *c.restored.entry(res).or_default() += 1;
                    if let Some(ms) = e.reaction_ms {
                        let s = ms / 1000.0;
                        let i = REACTION_BUCKETS
                            .iter()
                            .position(|b| s <= *b)
                            .unwrap_or(REACTION_BUCKETS.len());
                        c.reaction_buckets[i] += 1;
                        c.reaction_sum += s;
                        c.reaction_count += 1;
                    }
                }
                EventKind::Short | EventKind::Kept => {}
            }
        }
        let mut ev = lock(&self.events);
        if ev.len() >= EVENT_CAPACITY {
            ev.pop_front();
        }
        ev.push_back(e);
    }

    /// Recent events, oldest first.
    pub fn events(&self) -> Vec<ProtectionEvent> {
        lock(&self.events).iter().cloned().collect()
    }

    /// Counters.
    pub fn counters(&self) -> Counters {
        lock(&self.counters).clone()
    }

    /// The loop status.
    pub fn status(&self) -> ProtectionStatus {
        self.status
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Updates the loop status.
    pub fn update_status(&self, f: impl FnOnce(&mut ProtectionStatus)) {
        f(&mut self
            .status
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// Counts a PSI wake-up.
    pub fn count_psi(&self, n: u64) {
        self.psi_wakeups.fetch_add(n, Ordering::Relaxed);
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `d` in milliseconds as a float.
pub fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_count_and_histogram() {
        let s = Shared::default();
        let ev = |kind, reaction_ms| ProtectionEvent {
            at_unix_ms: 1,
            kind,
            resource: Resource::Cpu,
            level: 1,
            detail: String::new(),
            workloads: vec![],
            reaction_ms,
        };
        s.push_event(ev(EventKind::Hold, None), &[QosClass::BestEffort]);
        s.push_event(ev(EventKind::Restored, Some(42.0)), &[]);
        s.push_event(ev(EventKind::Restored, Some(9000.0)), &[]);
        let c = s.counters();
        assert_eq!(c.holds[&("cpu".to_string(), "BestEffort".to_string())], 1);
        assert_eq!(c.reaction_buckets[3], 1, "42 ms falls in the 50 ms bucket");
        assert_eq!(c.reaction_buckets[12], 1, "9 s is beyond the last bucket");
        assert_eq!(c.reaction_count, 2);
        assert_eq!(s.events().len(), 3);
        for _ in 0..EVENT_CAPACITY {
            s.push_event(ev(EventKind::Release, None), &[]);
        }
        assert_eq!(s.events().len(), EVENT_CAPACITY);
        s.set_watch(vec![]);
        assert_eq!(s.watch().generation, 0, "the same set is no change");
        let w = Watched::for_test("managed/a", QosClass::BestEffort, 0.0);
        s.set_watch(vec![w.clone()]);
        s.set_watch(vec![w]);
        assert_eq!(s.watch().generation, 1);
        s.set_watch(vec![]);
        assert_eq!(s.watch().generation, 2);
    }
}
