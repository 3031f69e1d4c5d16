//! The loop thread: waits on PSI triggers (and a wake-up pipe) until the next
//! tick, samples the watched workloads, steps one policy per resource and has
//! the actuator write the holds.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::actuator::{Actuator, Applied};
use super::hold_use::{HoldUse, io_share};
use super::policy::{Change, FloorObs, PolicyConfig, ResourcePolicy};
use super::psi::{self, Trigger};
use super::reclaim::NodeReclaim;
use super::sampler::{Need, Rates, Series};
use super::{EventKind, ProtectionEvent, Shared, WatchSet, Watched, ms_f, unix_ms};
use crate::cgroup::{AnyBackend, CgroupError};
use crate::qos::knob::Resource;

/// Loop settings.
#[derive(Debug, Clone)]
pub struct ProtectConfig {
    /// Tick of the fast sampler.
    pub sample_interval: Duration,
    /// Window over which CPU usage and stall are measured.
    pub window: Duration,
    /// The loop's own CPU as a share of one core: a tick costing more than this
    /// share of `sample_interval` stretches the interval to fit.
    pub cpu_budget: f64,
    /// Window for IO rates (IO completes in chunks: a longer window is less noisy).
    pub io_window: Duration,
    /// IO floors are threatened below this share of the floor (see `tick`).
    pub io_threat_ratio: f64,
    /// PSI trigger threshold (stall time within `psi_window`).
    pub psi_stall: Duration,
    /// PSI trigger window (at least 500 ms).
    pub psi_window: Duration,
    /// Thresholds and timings.
    pub policy: PolicyConfig,
    /// Online CPUs.
    pub cpus: u32,
    /// Disks the IO holds apply to.
    pub disks: Vec<(u32, u32)>,
    /// Where node pressure files are (`/proc/pressure`).
    pub proc_pressure: PathBuf,
    /// The kernel's memory counters (`/proc/vmstat`): the node's reclaim.
    pub vmstat: PathBuf,
}

impl Default for ProtectConfig {
    fn default() -> Self {
        ProtectConfig {
            sample_interval: Duration::from_millis(10),
            window: Duration::from_millis(50),
            cpu_budget: CPU_BUDGET,
            io_window: Duration::from_millis(100),
            io_threat_ratio: IO_THREAT_RATIO,
            psi_stall: Duration::from_millis(10),
            psi_window: psi::MIN_WINDOW,
            policy: PolicyConfig::default(),
            cpus: 1,
            disks: Vec::new(),
            proc_pressure: PathBuf::from("/proc/pressure"),
            vmstat: PathBuf::from("/proc/vmstat"),
        }
    }
}

/// The running loop.
#[derive(Debug)]
pub struct Protector {
    wake: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Protector {
    /// Starts the loop thread.
    pub fn spawn(
        backend: AnyBackend,
        cfg: ProtectConfig,
        shared: Arc<Shared>,
    ) -> std::io::Result<Self> {
        let (r, w) = rustix::pipe::pipe()?;
        let thread = std::thread::Builder::new()
            .name("daros-protect".into())
            .spawn(move || Loop::new(backend, cfg, shared).run(&r))?;
        Ok(Protector {
            wake: Some(w),
            thread: Some(thread),
        })
    }

    /// Stops the loop; it releases every hold before exiting.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(w) = self.wake.take() {
            let _ = rustix::io::write(&w, b"x");
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Protector {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The loop's default CPU budget, a share of one core. A tick reads a few
/// cgroup files per watched workload (~50 µs for two in a release build), so
/// at 10 ms this binds only with many workloads or on a slow machine; a debug
/// build in the TCG test VM spent 3.8 ms a tick, 0.38 of a core of two.
pub const CPU_BUDGET: f64 = 0.05;

/// The longest the budget stretches the interval: the loop still reacts.
const MAX_INTERVAL: Duration = Duration::from_millis(500);

/// Wake-up period while no workload has a floor.
const IDLE_INTERVAL: Duration = Duration::from_millis(250);

/// IO floors are threatened below this share of the floor by default (see `tick`).
const IO_THREAT_RATIO: f64 = 0.90;

/// Easing steps of a level-1 IO hold before its release. Released at once,
/// a hold at a quarter of the hog's rate let it surge back to all of it, and
/// within 0.4-2 s the reader was short again (three holds and releases in a
/// 30 s isolation run, each costing a second at 73-80 % of the floor). Six
/// steps of 1.5× end at 2.85× the hog's rate when first held: four (1.27×)
/// kept the hog at 33-38 % of its solo rate where the reader read its floor.
const IO_EASE_STEPS: u8 = 6;
/// A fully eased IO hold stays while a reserved workload reads or writes at
/// least this share of its floor. Released after the last step, the hog
/// surged back to all of its rate and the reader fell to 73 % of its target
/// 7 s later (the isolation bench on the host's disk, 2026-11-29).
const IO_KEEP_RATIO: f64 = 0.25;
/// An eased IO hold widens only while the held workloads use at least this
/// share of it on average (`PolicyConfig::widen_use`): below it the step
/// before already covered their mean rate. Widened regardless, holds went on
/// to 1.9-4.9 times the hog's mean rate beside the reader, and its surges
/// through them cost the reader its worst seconds (74.5 and 78.3 % of the
/// target in two isolation runs, 2026-11-30).
const IO_WIDEN_USE: f64 = 1.0 / super::actuator::IO_EASE_FACTOR;
const RESOURCES: [Resource; 3] = [Resource::Cpu, Resource::Memory, Resource::Io];

/// An IO easing step that let the floor slip is tried again after this long,
/// doubled while it keeps failing (up to 16 min). Tried again as soon as the
/// step below had held for the hold time, the same step slipped three times in
/// 51 s in one isolation run (host's disk, 2026-11-30), each slip a second at
/// 83-88 % of the reader's floor.
const IO_REPROBE_AFTER: Duration = Duration::from_secs(60);
/// The node's reclaim is judged over this window (kswapd scans in bursts).
const RECLAIM_WINDOW: Duration = Duration::from_millis(200);
/// kswapd scanning faster than this (pages/s, 16 MiB/s of 4 KiB pages) beside a
/// memory floor is a threat: it costs the node measurable CPU outside every
/// cgroup's weight, where a trickle reclaiming clean cache does not.
const RECLAIM_THREAT_PAGES_PER_SEC: f64 = 4096.0;
/// A memory hold shows only once the held workload has reclaimed (at swap
/// speed): the memory level rises no faster than this.
const MEMORY_ESCALATE_AFTER: Duration = Duration::from_secs(1);

struct Loop {
    backend: AnyBackend,
    cfg: ProtectConfig,
    shared: Arc<Shared>,
    watch: Arc<WatchSet>,
    series: BTreeMap<String, Series>,
    triggers: Vec<Trigger>,
    policies: BTreeMap<Resource, ResourcePolicy>,
    actuator: Actuator,
    started: Instant,
    buf: Vec<u8>,
    short_logged: BTreeMap<Resource, Instant>,
    /// How much of their IO holds the held workloads used since the last change.
    io_use: HoldUse,
    tick_cost: f64,
    /// The thread's CPU clock when the last tick ended.
    last_tick_end: Option<Duration>,
    /// The node's reclaim, read while a reserved workload has a memory floor.
    reclaim: Option<NodeReclaim>,
}

impl Loop {
    fn new(backend: AnyBackend, cfg: ProtectConfig, shared: Arc<Shared>) -> Self {
        let actuator = Actuator::new(backend.clone(), cfg.cpus, cfg.disks.clone());
        let policies = RESOURCES
            .iter()
            .map(|r| (*r, ResourcePolicy::new(&cfg.policy)))
            .collect();
        Loop {
            backend,
            cfg,
            shared,
            watch: Arc::new(WatchSet {
                generation: u64::MAX,
                workloads: Vec::new(),
            }),
            series: BTreeMap::new(),
            triggers: Vec::new(),
            policies,
            actuator,
            started: Instant::now(),
            buf: Vec::with_capacity(8192),
            short_logged: BTreeMap::new(),
            io_use: HoldUse::default(),
            tick_cost: 0.0,
            last_tick_end: None,
            reclaim: None,
        }
    }

    fn run(mut self, wake: &OwnedFd) {
        self.shared.update_status(|s| {
            s.running = true;
            s.sample_interval_ms = ms_f(self.cfg.sample_interval);
            s.interval_ms = s.sample_interval_ms;
        });
        info!(interval = ?self.cfg.sample_interval, "protection loop started");
        let mut next = Instant::now();
        loop {
            let ws = self.shared.watch();
            if ws.generation != self.watch.generation {
                self.rebuild(ws);
            }
            // Nothing reserved: nothing to protect, wake rarely (a new watch set is
            // picked up at the next wake-up).
            if !self.watch.workloads.iter().any(Watched::reserved) {
                next = next
                    .max(Instant::now() + IDLE_INTERVAL.saturating_sub(self.cfg.sample_interval));
            }
            let timeout = next.saturating_duration_since(Instant::now());
            let woke = match psi::wait(&self.triggers, wake, timeout) {
                Ok(w) => w,
                Err(e) => {
                    warn!(error = %e, "poll failed; sampling only");
                    std::thread::sleep(timeout);
                    psi::Woken::default()
                }
            };
            if woke.woken {
                break;
            }
            if !woke.gone.is_empty() {
                // A watched cgroup went away: rebuild at the next tick.
                self.watch = Arc::new(WatchSet {
                    generation: u64::MAX,
                    workloads: Vec::new(),
                });
            }
            let now = Instant::now();
            if !woke.fired.is_empty() {
                self.shared.count_psi(woke.fired.len() as u64);
            }
            if now >= next || !woke.fired.is_empty() {
                self.tick(now);
                next = now + self.interval();
            }
        }
        let watched = self.watch.workloads.clone();
        for r in RESOURCES {
            let a = self.actuator.release_all(r, &watched);
            if !a.writes.is_empty() {
                info!(resource = r.as_str(), writes = ?a.writes, "released on shutdown");
            }
        }
        self.shared.update_status(|s| {
            s.running = false;
            s.holds.clear();
        });
        info!("protection loop stopped");
    }

    fn rebuild(&mut self, ws: Arc<WatchSet>) {
        let keep = self.cfg.window.max(self.cfg.io_window) * 2;
        let mut series = BTreeMap::new();
        let mut notes = Vec::new();
        let reserved: Vec<&Watched> = ws.workloads.iter().filter(|w| w.reserved()).collect();
        let any_mem = reserved.iter().any(|w| w.floor_memory > 0.0);
        let any_io = reserved
            .iter()
            .any(|w| w.floor_io_read > 0.0 || w.floor_io_write > 0.0);
        // Each workload is re-opened (cheap) so that a changed floor changes what is read.
        self.series.clear();
        for w in &ws.workloads {
            let need = if w.reserved() {
                Need {
                    cpu: w.floor_cpu > 0.0,
                    memory: w.floor_memory > 0.0,
                    io: w.floor_io_read > 0.0 || w.floor_io_write > 0.0,
                    pressure: true,
                }
            } else if w.holdable() && (any_mem || any_io) {
                Need {
                    cpu: false,
                    memory: any_mem,
                    io: any_io,
                    pressure: false,
                }
            } else {
                continue;
            };
            let s = Series::open(&self.backend, &w.cgroup, need, keep);
            match s {
                Ok(s) => {
                    series.insert(w.id.clone(), s);
                }
                Err(e) if e.is_gone() => {
                    notes.push(format!("{}: cgroup {} not found", w.id, w.cgroup))
                }
                Err(e) => notes.push(format!("{}: {e}", w.id)),
            }
        }
        self.series = series;
        self.reclaim = None;
        if any_mem {
            match NodeReclaim::open(&self.cfg.vmstat, RECLAIM_WINDOW * 2) {
                Ok(Some(r)) => self.reclaim = Some(r),
                Ok(None) => notes.push(format!(
                    "{} not found: the node's reclaim is not watched",
                    self.cfg.vmstat.display()
                )),
                Err(e) => notes.push(format!("{e}: the node's reclaim is not watched")),
            }
        }
        self.triggers.clear();
        let mut armed = Vec::new();
        let any_reserved = ws.workloads.iter().any(Watched::reserved);
        if any_reserved {
            for (file, label) in [
                ("cpu", "node cpu"),
                ("memory", "node memory"),
                ("io", "node io"),
            ] {
                self.arm(
                    self.cfg.proc_pressure.join(file),
                    label.to_string(),
                    &mut armed,
                    &mut notes,
                );
            }
        }
        for w in ws.workloads.iter().filter(|w| w.reserved()) {
            let Some(dir) = self.psi_dir(w) else { continue };
            for res in ["cpu", "memory", "io"] {
                self.arm(
                    dir.join(format!("{res}.pressure")),
                    format!("{} {res}", w.id),
                    &mut armed,
                    &mut notes,
                );
            }
        }
        // Holds survive a rebuild; writes made meanwhile by the QoS service are undone.
        for r in RESOURCES {
            let level = self.policies.get(&r).map_or(0, ResourcePolicy::level);
            if level > 0 {
                let rates = self.rates();
                let a = self.actuator.set_level(r, level, &ws.workloads, &rates);
                for e in a.errors {
                    warn!(resource = r.as_str(), error = %e, "re-asserting hold failed");
                }
            }
        }
        self.shared.update_status(|s| {
            s.psi_triggers = armed;
            s.notes = notes;
        });
        self.watch = ws;
    }

    fn arm(
        &mut self,
        path: PathBuf,
        label: String,
        armed: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) {
        match Trigger::arm(
            &path,
            self.cfg.psi_stall,
            self.cfg.psi_window,
            label.clone(),
        ) {
            Ok(t) => {
                armed.push(format!("{label}: {}", t.spec));
                self.triggers.push(t);
            }
            Err(e) => notes.push(format!("{e}; sampling only")),
        }
    }

    fn psi_dir(&self, w: &Watched) -> Option<PathBuf> {
        match &self.backend {
            AnyBackend::V2(b) => Some(b.dir(&w.cgroup)),
            AnyBackend::V1(b) => b.unified().map(|u| w.cgroup.under(u)),
        }
    }

    fn rates(&self) -> BTreeMap<String, Rates> {
        self.series
            .iter()
            .filter_map(|(id, s)| s.rates(self.cfg.window).map(|r| (id.clone(), r)))
            .collect()
    }

    /// The sample interval, stretched so that ticks stay within the CPU budget.
    fn interval(&self) -> Duration {
        budget_interval(
            self.cfg.sample_interval,
            self.tick_cost,
            self.cfg.cpu_budget,
        )
    }

    fn tick(&mut self, now: Instant) {
        self.shared
            .ticks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cpu0 = thread_cpu();
        self.tick_inner(now);
        let cpu1 = thread_cpu();
        let cost = loop_cost(self.last_tick_end, cpu0, cpu1).as_secs_f64() * 1e6;
        self.last_tick_end = Some(cpu1);
        self.tick_cost = if self.tick_cost == 0.0 {
            cost
        } else {
            0.95 * self.tick_cost + 0.05 * cost
        };
        let (c, every) = (self.tick_cost, ms_f(self.interval()));
        if self.shared.ticks.load(std::sync::atomic::Ordering::Relaxed) % 100 == 1 {
            self.shared.update_status(|s| {
                s.tick_cost_us = c;
                s.interval_ms = every;
            });
        }
    }

    fn tick_inner(&mut self, now: Instant) {
        let mut gone: Vec<String> = Vec::new();
        for (id, s) in &mut self.series {
            if let Err(e) = s.read(&mut self.buf, now) {
                if !matches!(e, CgroupError::Gone { .. }) {
                    warn!(workload = %id, error = %e, "sampling failed");
                }
                gone.push(id.clone());
            }
        }
        for id in gone {
            self.series.remove(&id);
        }
        if let Some(r) = &mut self.reclaim
            && let Err(e) = r.read(&mut self.buf, now)
        {
            warn!(error = %e, "reading the node's reclaim failed");
            self.reclaim = None;
        }
        let reclaim = self
            .reclaim
            .as_ref()
            .and_then(|r| r.scanned(RECLAIM_WINDOW));
        let rates = self.rates();
        let io_rates: BTreeMap<String, Rates> = self
            .series
            .iter()
            .filter_map(|(id, s)| s.rates(self.cfg.io_window).map(|r| (id.clone(), r)))
            .collect();
        // Floors are judged over windows the workload spent on IO throughout;
        // the holds size themselves by the plain rates.
        let io_judged: BTreeMap<String, Rates> = self
            .series
            .iter()
            .filter_map(|(id, s)| s.busy_io_rates(self.cfg.io_window).map(|r| (id.clone(), r)))
            .collect();
        let t = now.saturating_duration_since(self.started);
        let ws = Arc::clone(&self.watch);
        let watched = &ws.workloads;
        let mut changed = false;
        let interval = self.interval();
        for res in RESOURCES {
            let mut obs = observations(res, watched, &rates, &io_judged, &io_rates);
            if res == Resource::Memory
                && let Some(o) = reclaim_obs(watched, reclaim)
            {
                obs.push(o);
            }
            let Some(policy) = self.policies.get_mut(&res) else {
                continue;
            };
            // A reserved workload without rates yet (a new series) is not a
            // workload gone: the level stays until it is measured again.
            if obs.is_empty() && watched.iter().any(|w| w.reserved() && has_floor(res, w)) {
                continue;
            }
            if obs.is_empty() {
                if policy.level() > 0 {
                    *policy = ResourcePolicy::new(&self.cfg.policy);
                    let a = self.actuator.release_all(res, watched);
                    self.event(
                        EventKind::Release,
                        res,
                        0,
                        "no reserved workload left".into(),
                        a,
                        None,
                    );
                }
                continue;
            }
            // A hold shows in the next full measurement window of its resource:
            // escalate no sooner, and no later (CPU: 60 ms, IO: 110 ms).
            let window = if res == Resource::Io {
                self.cfg.io_window
            } else {
                self.cfg.window
            };
            let full_window = window + interval;
            let mut pc = PolicyConfig {
                escalate_after: match res {
                    Resource::Io => full_window,
                    Resource::Memory => MEMORY_ESCALATE_AFTER,
                    _ => self.cfg.policy.escalate_after.min(full_window),
                },
                ..self.cfg.policy
            };
            if res == Resource::Io {
                // IO pressure counts every synchronous wait, contended or not, so
                // for IO the loop judges throughput alone: a reader at its floor
                // always "stalls", and one at exactly its floor reads 95-97 % of it
                // in a 100 ms window. It holds below IO_THREAT_RATIO (iocost's
                // weights are the first line) and calls meeting the floor
                // comfortable; otherwise a workload reading at its floor would keep
                // the others held for ever (the isolation benchmark's hog kept 1 %).
                pc.threat_ratio = pc.threat_ratio.min(self.cfg.io_threat_ratio);
                pc.comfortable_ratio = pc.comfortable_ratio.min(pc.restored_ratio);
                pc.ease_steps = IO_EASE_STEPS;
                // Halfway between the threat and restored: behind iocost 85 %.
                // At 95 % an eased hold kept the hog at half of what iocost
                // alone left it (469 against 931 MiB/s in one isolation run),
                // whose reader read 93-100 % of its floor each second.
                pc.slip_ratio = f64::midpoint(pc.threat_ratio, pc.restored_ratio);
                pc.keep_ratio = IO_KEEP_RATIO;
                // A slip must last a full window: one window's dip below the
                // slip ratio is the reader's own noise as often as the hog's
                // doing (isolation runs, 2026-11-29: slips at 86-92 % of the
                // target took a hold back to steps 2, 0 and 1, each doubling
                // the hold time, and the hog kept 10 % of its rate).
                pc.slip_confirm = full_window;
                pc.widen_use = IO_WIDEN_USE;
                pc.reprobe_after = IO_REPROBE_AFTER;
            }
            let held_use = (res == Resource::Io).then(|| {
                self.io_use
                    .add(io_share(self.actuator.io_holds(), &io_rates));
                self.io_use.mean()
            });
            let changes = policy.step_using(&pc, t, &obs, held_use.flatten());
            if res == Resource::Io
                && changes
                    .iter()
                    .any(|c| !matches!(c, Change::Restored { .. } | Change::Kept { .. }))
            {
                self.io_use.reset();
            }
            let level = policy.level();
            changed |= !changes.is_empty();
            for c in changes {
                let holdable = watched.iter().any(Watched::holdable);
                match c {
                    Change::Hold { why } | Change::Tighten { why, .. } if !holdable => {
                        let last = self.short_logged.get(&res);
                        if last.is_none_or(|l| {
                            now.saturating_duration_since(*l) > Duration::from_secs(10)
                        }) {
                            self.short_logged.insert(res, now);
                            self.event(
                                EventKind::Short,
                                res,
                                level,
                                format!("{why}; no BestEffort or Burstable workload to hold back"),
                                Applied::default(),
                                None,
                            );
                        }
                    }
                    Change::Hold { why } => {
                        let r = if res == Resource::Io {
                            &io_rates
                        } else {
                            &rates
                        };
                        let a = self.actuator.set_level(res, level, watched, r);
                        self.event(EventKind::Hold, res, level, why, a, None);
                    }
                    Change::Tighten { why, .. } => {
                        let r = if res == Resource::Io {
                            &io_rates
                        } else {
                            &rates
                        };
                        let a = self.actuator.set_level(res, level, watched, r);
                        self.event(EventKind::Tighten, res, level, why, a, None);
                    }
                    Change::Release { level } => {
                        let a = if level == 0 {
                            self.actuator.release_all(res, watched)
                        } else {
                            let r = if res == Resource::Io {
                                &io_rates
                            } else {
                                &rates
                            };
                            self.actuator.set_level(res, level, watched, r)
                        };
                        self.event(
                            EventKind::Release,
                            res,
                            level,
                            "reserved workloads comfortable for the hold time".into(),
                            a,
                            None,
                        );
                    }
                    Change::Ease { step, wider } => {
                        let a = self.actuator.set_ease(res, step, watched);
                        let (kind, why) = if wider {
                            (
                                EventKind::Release,
                                format!(
                                    "reserved workloads comfortable for the hold time: eased to step {step} of {IO_EASE_STEPS}"
                                ),
                            )
                        } else {
                            (
                                EventKind::Tighten,
                                format!(
                                    "a floor slipped under the eased hold: back to step {step}"
                                ),
                            )
                        };
                        self.event(kind, res, level, why, a, None);
                    }
                    Change::Kept { step, why } => {
                        self.event(
                            EventKind::Kept,
                            res,
                            level,
                            format!(
                                "eased to step {step} of {IO_EASE_STEPS} and kept there: {why}; released once it has been idle for the hold time"
                            ),
                            Applied::default(),
                            None,
                        );
                    }
                    Change::Restored { after } => {
                        self.event(
                            EventKind::Restored,
                            res,
                            level,
                            "floors back at or above 95%".into(),
                            Applied::default(),
                            Some(ms_f(after)),
                        );
                    }
                }
            }
        }
        if !changed {
            return;
        }
        let holds = self.actuator.holds();
        let levels = self
            .policies
            .iter()
            .map(|(r, p)| (r.as_str().to_string(), p.level()))
            .collect();
        self.shared.update_status(|s| {
            s.holds = holds;
            s.levels = levels;
        });
    }

    fn event(
        &self,
        kind: EventKind,
        res: Resource,
        level: u8,
        why: String,
        a: Applied,
        reaction_ms: Option<f64>,
    ) {
        let mut detail = why;
        if !a.writes.is_empty() {
            detail.push_str(": ");
            detail.push_str(&a.writes.join(", "));
        }
        for e in &a.errors {
            warn!(resource = res.as_str(), error = %e, "protection write refused");
        }
        if !a.errors.is_empty() {
            detail.push_str(&format!(" (refused: {})", a.errors.join("; ")));
        }
        info!(event = ?kind, resource = res.as_str(), level, reaction_ms, detail = %detail, "protection");
        self.shared.push_event(
            ProtectionEvent {
                at_unix_ms: unix_ms(),
                kind,
                resource: res,
                level,
                detail,
                workloads: a.workloads,
                reaction_ms,
            },
            &a.classes,
        );
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Whether `w` has a floor the loop watches on `res`.
fn has_floor(res: Resource, w: &Watched) -> bool {
    match res {
        Resource::Cpu => w.floor_cpu > 0.0,
        Resource::Memory => w.floor_memory > 0.0,
        Resource::Io => w.floor_io_read > 0.0 || w.floor_io_write > 0.0,
        _ => false,
    }
}

/// The reserved workloads' observations of one resource.
fn observations(
    res: Resource,
    watched: &[Watched],
    rates: &BTreeMap<String, Rates>,
    io_rates: &BTreeMap<String, Rates>,
    io_plain: &BTreeMap<String, Rates>,
) -> Vec<FloorObs> {
    let mut out = Vec::new();
    for w in watched.iter().filter(|w| w.reserved()) {
        let obs = |floor: f64, usage: f64, stall: f64| FloorObs {
            id: w.id.clone(),
            floor,
            usage,
            stall,
            why: None,
        };
        match res {
            Resource::Cpu if w.floor_cpu > 0.0 => {
                if let Some(r) = rates.get(&w.id) {
                    out.push(obs(w.floor_cpu, r.cpu_cores, r.stall[0]));
                }
            }
            Resource::Memory if w.floor_memory > 0.0 => {
                // Below its floor is a threat only while it stalls growing into
                // it (reclaim stalls are charged to the allocating task).
                if let Some(r) = rates.get(&w.id) {
                    out.push(obs(w.floor_memory, r.memory as f64, r.stall[1]));
                }
            }
            Resource::Io => {
                // Idle over the whole window (no byte, no IO stall): seen as
                // using nothing, so an eased hold kept for it can end. One
                // that started within the window is not judged yet.
                let idle = io_plain
                    .get(&w.id)
                    .filter(|r| r.io_read() == 0.0 && r.io_write() == 0.0 && r.stall[2] == 0.0);
                if let Some(r) = io_rates.get(&w.id).or(idle) {
                    if w.floor_io_read > 0.0 {
                        out.push(obs(w.floor_io_read, r.io_read(), r.stall[2]));
                    }
                    if w.floor_io_write > 0.0 {
                        out.push(obs(w.floor_io_write, r.io_write(), r.stall[2]));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The node's reclaim as one more observation of the memory floors: where a
/// reserved workload has one and kswapd scanned faster than
/// [`RECLAIM_THREAT_PAGES_PER_SEC`] over [`RECLAIM_WINDOW`], a threat (see
/// [`super::reclaim`]); otherwise comfortable.
fn reclaim_obs(watched: &[Watched], scanned: Option<u64>) -> Option<FloorObs> {
    let scanned = scanned?;
    let has_floor = |w: &&Watched| w.reserved() && w.floor_memory > 0.0;
    if !watched.iter().any(|w| has_floor(&w)) {
        return None;
    }
    let rate = scanned as f64 / RECLAIM_WINDOW.as_secs_f64();
    let threat = rate > RECLAIM_THREAT_PAGES_PER_SEC;
    // The words only where they are used: this runs every tick.
    let why = threat.then(|| {
        let floors: Vec<&str> = watched
            .iter()
            .filter(has_floor)
            .map(|w| w.id.as_str())
            .collect();
        format!(
            "the node is reclaiming (kswapd scanned {rate:.0} pages/s) beside the memory floor of {}",
            floors.join(", ")
        )
    });
    Some(FloorObs {
        id: "node".into(),
        floor: 1.0,
        usage: if threat { 0.0 } else { 1.0 },
        stall: if threat { 1.0 } else { 0.0 },
        why,
    })
}

/// The loop's CPU for the tick that ran from `start` to `end` (thread CPU
/// clock): the tick itself and everything the thread did since the previous
/// tick ended (`last_end`) — the poll on the PSI triggers and its wake-ups,
/// a rebuild of the watch set. The poll is not free: under an emulator it
/// was as much again as the ticks.
fn loop_cost(last_end: Option<Duration>, start: Duration, end: Duration) -> Duration {
    let from = last_end.map_or(start, |l| l.min(start));
    end.saturating_sub(from)
}

/// `interval`, or longer where a tick costing `tick_cost_us` would spend more
/// than `budget` of one core: the interval at which it spends exactly that, at
/// most [`MAX_INTERVAL`] (never shorter than asked).
fn budget_interval(interval: Duration, tick_cost_us: f64, budget: f64) -> Duration {
    let fit = Duration::from_secs_f64((tick_cost_us / 1e6 / budget.max(1e-3)).min(60.0));
    interval.max(fit.min(MAX_INTERVAL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::QosClass;

    fn watched(id: &str, class: QosClass, floor_memory: f64) -> Watched {
        Watched::for_test(id, class, floor_memory)
    }

    #[test]
    fn the_nodes_reclaim_threatens_only_beside_a_memory_floor_and_above_a_trickle() {
        let c = PolicyConfig::default();
        let gp = watched("gp", QosClass::GuaranteedPro, 224e6);
        let hog = watched("hog", QosClass::BestEffort, 0.0);
        // 2,000 pages in 200 ms: 10,000 pages/s.
        let o = reclaim_obs(&[gp.clone(), hog.clone()], Some(2_000)).unwrap();
        assert!(o.threatened(&c), "{o:?}");
        assert!(
            o.why.as_deref().unwrap().contains("memory floor of gp"),
            "{o:?}"
        );
        // A trickle (500 pages/s) and no scan at all are comfortable.
        for n in [100, 0] {
            let o = reclaim_obs(&[gp.clone(), hog.clone()], Some(n)).unwrap();
            assert!(!o.threatened(&c) && o.comfortable(&c), "{o:?}");
        }
        // No memory floor: the node's reclaim is none of the loop's business.
        let cpu_only = watched("gp", QosClass::GuaranteedPro, 0.0);
        assert!(reclaim_obs(&[cpu_only, hog.clone()], Some(2_000)).is_none());
        // Not measured yet.
        assert!(reclaim_obs(&[gp, hog], None).is_none());
    }

    #[test]
    fn an_idle_reader_is_seen_using_nothing_and_one_just_started_is_not_judged() {
        let mut gp = watched("gp", QosClass::GuaranteedPro, 0.0);
        gp.floor_io_read = 100e6;
        let rates = |read: f64, stall: f64| Rates {
            span: Duration::from_secs(1),
            cpu_cores: 0.0,
            memory: 0,
            io: vec![(8, 0, read, 0.0)],
            stall: [0.0, 0.0, stall],
        };
        let one = |r: Rates| BTreeMap::from([("gp".to_string(), r)]);
        let none = BTreeMap::new();
        let ws = std::slice::from_ref(&gp);
        // Busy throughout: judged by the busy window.
        let o = observations(
            Resource::Io,
            ws,
            &none,
            &one(rates(80e6, 0.9)),
            &one(rates(80e6, 0.9)),
        );
        assert_eq!((o.len(), o[0].usage), (1, 80e6));
        // Idle throughout: one observation using nothing, comfortable.
        let o = observations(Resource::Io, ws, &none, &none, &one(rates(0.0, 0.0)));
        assert_eq!((o.len(), o[0].usage, o[0].stall), (1, 0.0, 0.0));
        assert!(o[0].comfortable(&PolicyConfig::default()));
        // Began reading within the window: not judged.
        let o = observations(Resource::Io, ws, &none, &none, &one(rates(30e6, 0.2)));
        assert!(o.is_empty(), "{o:?}");
    }

    #[test]
    fn a_ticks_cost_counts_the_wait_before_it() {
        let us = Duration::from_micros;
        // The first tick: its own work only.
        assert_eq!(loop_cost(None, us(1_000), us(1_300)), us(300));
        // Later ticks: since the previous one ended, the poll included.
        assert_eq!(loop_cost(Some(us(1_300)), us(1_700), us(2_000)), us(700));
        // A clock that went back (it does not; a thread's clock is
        // monotonic) is the tick alone, never negative.
        assert_eq!(loop_cost(Some(us(5_000)), us(1_700), us(2_000)), us(300));
    }

    #[test]
    fn the_budget_stretches_the_interval_only_when_a_tick_costs_more() {
        let ms = Duration::from_millis;
        // 50 µs a tick at 10 ms is 0.5 % of a core: inside 5 %.
        assert_eq!(budget_interval(ms(10), 50.0, 0.05), ms(10));
        // 3.8 ms a tick (a debug build under TCG) fits 5 % at 76 ms.
        assert_eq!(budget_interval(ms(10), 3_800.0, 0.05), ms(76));
        // Never longer than MAX_INTERVAL, never shorter than asked.
        assert_eq!(budget_interval(ms(10), 1e6, 0.05), MAX_INTERVAL);
        assert_eq!(budget_interval(ms(900), 3_800.0, 0.05), ms(900));
        // Before the first tick there is no cost.
        assert_eq!(budget_interval(ms(10), 0.0, 0.05), ms(10));
    }
}
