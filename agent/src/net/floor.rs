//! The floor loop on its own thread: every tick (10 ms by default) the
//! [`FloorRunner`] reads the counters of the workloads the reconcile thread
//! handed it, decides which BestEffort and Burstable workloads to cap so that
//! active floors keep their bandwidth, and writes the caps that changed. A
//! thread of its own, so API requests and sampling never delay a tick.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daros_ebpf::floor::{DirDecision, FloorDecision, FloorError};
use daros_ebpf::floor_runner::monotonic_ns;
use daros_ebpf::{
    Direction, FloorConfig, FloorRunner, FloorWorkload, NetDatapath, NetFloorController,
};
use tracing::{info, warn};

use super::service::{NetSettings, Shared, lock};
use crate::model::net::{FloorDirection, FloorStatus};

/// What the floor loop last did, for `/v1/net` and metrics.
#[derive(Debug, Default, Clone)]
pub struct FloorView {
    /// The thread runs.
    pub running: bool,
    /// Ticks run.
    pub ticks: u64,
    /// Cap writes.
    pub cap_writes: u64,
    /// Failed ticks.
    pub errors: u64,
    /// Latest decision.
    pub decision: FloorDecision,
    /// Floor caps in force: (cgroup id, 0 egress / 1 ingress) → bytes/s.
    pub caps: BTreeMap<(u64, u8), u64>,
    /// Since when (monotonic ns) each of them is in force.
    pub since: BTreeMap<(u64, u8), u64>,
    /// Why the latest workload set was refused (the previous one stays).
    pub refused: Option<String>,
}

fn dir_view(d: &DirDecision) -> FloorDirection {
    FloorDirection {
        capping: d.capping,
        reserved_bytes_per_second: d.reserved_bps,
        shortfall_reserve_bytes_per_second: d.shortfall_reserve_bps,
        budget_bytes_per_second: d.budget_bps,
        demand_bytes_per_second: d.demand_bps,
    }
}

impl FloorView {
    /// The API view.
    pub fn status(&self, settings: &NetSettings, detail: &(bool, String)) -> FloorStatus {
        let mut text = detail.1.clone();
        if let Some(r) = &self.refused {
            text.push_str(&format!(
                "; latest workload set refused (previous kept): {r}"
            ));
        }
        FloorStatus {
            running: self.running,
            detail: text,
            egress_capacity_bytes_per_second: settings.floor.egress_capacity_bps,
            ingress_capacity_bytes_per_second: settings.floor.ingress_capacity_bps,
            period_ms: u64::try_from(settings.floor_period.as_millis()).unwrap_or(u64::MAX),
            ticks_total: self.ticks,
            cap_writes_total: self.cap_writes,
            errors_total: self.errors,
            egress: dir_view(&self.decision.egress),
            ingress: dir_view(&self.decision.ingress),
        }
    }
}

/// The loop, before it runs.
#[derive(Debug)]
pub struct FloorLoop {
    runner: FloorRunner,
    net: Arc<Mutex<NetDatapath>>,
    period: Duration,
    updates: Receiver<Vec<FloorWorkload>>,
    shared: Arc<Shared>,
}

impl FloorLoop {
    /// A loop over `net` with `cfg`; the returned sender hands it new workload sets.
    pub fn new(
        cfg: FloorConfig,
        net: Arc<Mutex<NetDatapath>>,
        period: Duration,
        shared: Arc<Shared>,
    ) -> Result<(Self, Sender<Vec<FloorWorkload>>), FloorError> {
        let ctl = NetFloorController::new(cfg)?;
        let (tx, rx) = mpsc::channel();
        Ok((
            FloorLoop {
                runner: FloorRunner::new(ctl),
                net,
                period,
                updates: rx,
                shared,
            },
            tx,
        ))
    }

    fn take_updates(&mut self) {
        let mut latest = None;
        while let Ok(ws) = self.updates.try_recv() {
            latest = Some(ws);
        }
        let Some(ws) = latest else { return };
        let n = ws.len();
        match self.runner.controller_mut().set_workloads(ws) {
            Ok(()) => {
                info!(workloads = n, "floor loop workload set updated");
                lock(&self.shared.floor).refused = None;
            }
            Err(e) => {
                warn!(error = %e, "floor loop refused the workload set; keeping the previous one");
                lock(&self.shared.floor).refused = Some(e.to_string());
            }
        }
    }

    /// Ticks until `stop` receives (or its sender is dropped), then lifts the
    /// floor caps it set.
    pub fn run(mut self, stop: Receiver<()>) {
        lock(&self.shared.floor).running = true;
        info!(
            period_ms = self.period.as_millis() as u64,
            "floor loop running"
        );
        let mut next = Instant::now();
        let mut errors = 0u64;
        loop {
            self.take_updates();
            let now_ns = monotonic_ns();
            let result = {
                let mut net = lock(&self.net);
                self.runner.tick(&mut net, now_ns).cloned()
            };
            let stats = self.runner.stats();
            {
                let mut view = lock(&self.shared.floor);
                view.ticks = stats.ticks;
                view.cap_writes = stats.cap_writes;
                match result {
                    Ok(d) => {
                        view.caps.clear();
                        for (i, dir) in Direction::ALL.into_iter().enumerate() {
                            for (id, cap) in &d.dir(dir).caps {
                                view.caps.insert((id.0, i as u8), *cap);
                            }
                        }
                        let FloorView { caps, since, .. } = &mut *view;
                        since.retain(|k, _| caps.contains_key(k));
                        for k in caps.keys() {
                            since.entry(*k).or_insert(now_ns);
                        }
                        view.decision = d;
                    }
                    Err(e) => {
                        errors += 1;
                        view.errors = errors;
                        if errors.is_power_of_two() {
                            warn!(error = %e, errors, "floor loop tick failed");
                        }
                    }
                }
            }
            next += self.period;
            let now = Instant::now();
            if next <= now {
                next = now + self.period; // fell behind: skip, do not burst
            }
            match stop.recv_timeout(next - now) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => break,
            }
        }
        self.lift_all();
        lock(&self.shared.floor).running = false;
        info!(stats = ?self.runner.stats(), "floor loop stopped; its caps lifted");
    }

    fn lift_all(&mut self) {
        let ids: Vec<_> = self
            .runner
            .controller()
            .workloads()
            .iter()
            .map(|w| w.cgroup)
            .collect();
        let mut net = lock(&self.net);
        for id in ids {
            let Ok(w) = net.reader().workload(id) else {
                continue;
            };
            for (dir, status) in [
                (Direction::Egress, w.egress),
                (Direction::Ingress, w.ingress),
            ] {
                if status.floor_cap_bps.is_some()
                    && let Err(e) = net.set_floor_cap(id, dir, None)
                {
                    warn!(cgroup = %id, direction = dir.as_str(), error = %e, "cannot lift floor cap");
                }
            }
        }
        let mut view = lock(&self.shared.floor);
        view.caps.clear();
        view.since.clear();
    }
}
