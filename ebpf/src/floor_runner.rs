//! Runs the [`NetFloorController`] against the live datapath: every tick (10–20 ms) it reads
//! the counters of the controlled workloads, turns them into rates over a short window, asks
//! the controller for caps and writes the ones that changed into the maps.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use crate::{
    cgroup::CgroupId,
    error::Result,
    floor::{FloorDecision, Measured, NetFloorController},
    net::{Direction, NetDatapath},
    rate::RateMeter,
};

/// Default tick.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);
/// Window over which rates are averaged.
pub const RATE_WINDOW: Duration = Duration::from_millis(30);
/// Caps closer than this fraction to the enforced one are not rewritten.
const REWRITE_THRESHOLD: f64 = 0.02;

/// CLOCK_MONOTONIC in ns, the clock of the eBPF programs (`bpf_ktime_get_ns`).
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Counters of what the runner did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunnerStats {
    /// Ticks run.
    pub ticks: u64,
    /// Cap writes (set or lift).
    pub cap_writes: u64,
    /// Ticks that failed (logged).
    pub errors: u64,
}

/// The floor loop.
#[derive(Debug)]
pub struct FloorRunner {
    ctl: NetFloorController,
    meter: RateMeter<(CgroupId, Direction)>,
    stats: RunnerStats,
    last: FloorDecision,
}

impl FloorRunner {
    /// A runner around a configured controller.
    pub fn new(ctl: NetFloorController) -> Self {
        Self {
            ctl,
            meter: RateMeter::new(u64::try_from(RATE_WINDOW.as_nanos()).unwrap_or(u64::MAX)),
            stats: RunnerStats::default(),
            last: FloorDecision::default(),
        }
    }

    /// The controller, e.g. to change workloads or capacity.
    pub fn controller_mut(&mut self) -> &mut NetFloorController {
        &mut self.ctl
    }

    /// The controller.
    pub fn controller(&self) -> &NetFloorController {
        &self.ctl
    }

    /// What the runner did so far.
    pub fn stats(&self) -> RunnerStats {
        self.stats
    }

    /// The last decision.
    pub fn last_decision(&self) -> &FloorDecision {
        &self.last
    }

    /// One tick at monotonic time `now_ns`.
    pub fn tick(&mut self, net: &mut NetDatapath, now_ns: u64) -> Result<&FloorDecision> {
        self.stats.ticks += 1;
        let mut measured = BTreeMap::new();
        let mut current = BTreeMap::new();
        let ids: Vec<CgroupId> = self.ctl.workloads().iter().map(|w| w.cgroup).collect();
        for id in &ids {
            let w = match net.reader().workload(*id) {
                Ok(w) => w,
                Err(crate::Error::UnknownWorkload(_)) => continue, // not registered (yet)
                Err(e) => return Err(e),
            };
            let mut m = Measured::default();
            for dir in Direction::ALL {
                self.meter
                    .observe(&(*id, dir), now_ns, w.counters.dir(dir).bytes);
                let r = self.meter.rate(&(*id, dir)).unwrap_or(0.0);
                match dir {
                    Direction::Egress => m.egress_bps = r,
                    Direction::Ingress => m.ingress_bps = r,
                }
                let status = match dir {
                    Direction::Egress => w.egress,
                    Direction::Ingress => w.ingress,
                };
                if let Some(cap) = status.floor_cap_bps {
                    current.insert((*id, dir), cap);
                }
            }
            measured.insert(*id, m);
        }
        self.meter.retain(|(id, _)| ids.contains(id));
        let decision = self.ctl.tick(&measured, &current, now_ns);
        for id in measured.keys() {
            for dir in Direction::ALL {
                let want = decision.dir(dir).caps.get(id).copied();
                let have = current.get(&(*id, dir)).copied();
                let differs = match (want, have) {
                    (Some(w), Some(h)) => {
                        (w as f64 - h as f64).abs() > REWRITE_THRESHOLD * h as f64
                    }
                    (None, None) => false,
                    _ => true,
                };
                if differs {
                    net.set_floor_cap(*id, dir, want)?;
                    self.stats.cap_writes += 1;
                    match want {
                        Some(cap) => {
                            tracing::debug!(cgroup = %id, direction = dir.as_str(), cap_bps = cap, "floor cap set")
                        }
                        None => {
                            tracing::info!(cgroup = %id, direction = dir.as_str(), "floor cap lifted")
                        }
                    }
                }
            }
        }
        self.last = decision;
        Ok(&self.last)
    }

    /// Ticks every `period` until `stop` turns true (or its sender is dropped). Errors are
    /// logged and counted; the loop keeps going, since the caps in the maps stay in force.
    pub async fn run(
        mut self,
        net: Arc<Mutex<NetDatapath>>,
        period: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return self;
                    }
                }
            }
            let mut guard = net.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(e) = self.tick(&mut guard, monotonic_ns()) {
                self.stats.errors += 1;
                if self.stats.errors.is_power_of_two() {
                    tracing::warn!(error = %e, errors = self.stats.errors, "floor loop tick failed");
                }
            }
        }
    }
}
