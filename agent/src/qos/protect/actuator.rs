//! Turns a resource's hold level into knob values on the holdable workloads
//! and writes them (through the cgroup layer); restores the static values the
//! mapping wrote when a hold ends.
//!
//! Level L holds BestEffort with factor ½^(L−1) and, from level 2 (level 1 if
//! there is no BestEffort workload), Burstable with ½^(L−2):
//! - cpu: a share of the cores the floors leave (`cpus − Σ floors − 5%`) as
//!   `cpu.max` with a 20 ms period (fine-grained so the reserved workload sees
//!   the freed CPU within its measurement window), and the least weight
//!   (`cpu.weight` 1, `cpu.shares` 2) so that its threads, refilled every
//!   period, do not take the reserved workload's cores first;
//! - memory: `memory.high` at usage when first held (growth stops), one step
//!   (16 MiB) lower per further level, never below a Burstable workload's
//!   request;
//! - io: `io.max` on every device at a quarter of the rate the workload had
//!   when first held, halved per level, at least 1 MiB/s; a level-1 hold
//!   eases by `IO_EASE_FACTOR` per step before it is released (the policy's
//!   easing steps), so the held workload finds the rate the protected one can
//!   spare instead of surging back to all of it at once.

use std::collections::BTreeMap;

use daros_coordinator::QosClass;

use super::sampler::Rates;
use super::{HoldView, Watched, unix_ms};
use crate::cgroup::v2::io::IoMaxLine;
use crate::cgroup::{AnyBackend, fs, v1, v2};
use crate::qos::knob::Resource;

/// CFS period used while holding CPU, µs.
pub const HOLD_PERIOD_US: u64 = 20_000;
/// `cpu.weight` of a workload while its CPU is held (v2's least).
pub const HELD_CPU_WEIGHT: u64 = 1;
/// `cpu.shares` of a workload while its CPU is held (v1's least).
pub const HELD_CPU_SHARES: u64 = 2;
/// Smallest CPU share left to a held workload, millicores.
pub const MIN_HOLD_MILLIS: u64 = 50;
/// The memory.high step per level. The kernel reclaims what a lowered
/// memory.high leaves above it in the writing thread (the loop's own, under no
/// workload's weight) before the write returns: with steps of ⅛ of usage
/// (60-70 MiB for the isolation bench's hog) the loop's thread took 0.9-1.2 of
/// the VM's two cores for two seconds, the protected reader's CPU. A small
/// step bounds that; the held workload's own further growth is reclaimed in
/// its own context, under its own weight.
pub const MEMORY_STEP: u64 = 16 << 20;
/// Smallest memory.high a held BestEffort workload gets.
pub const MIN_MEMORY_HIGH: u64 = 16 << 20;
/// Smallest IO rate left to a held workload, bytes/s.
pub const MIN_IO_RATE: u64 = 1 << 20;
/// How much each easing step widens a level-1 IO hold: from a quarter of the
/// rate at the hold, six steps (`IO_EASE_STEPS` in run.rs) reach 2.85 times it.
pub const IO_EASE_FACTOR: f64 = 1.5;

#[derive(Debug, Clone, PartialEq)]
enum Value {
    CpuMillis(u64),
    MemoryHigh(u64),
    Io(Vec<IoMaxLine>),
}

#[derive(Debug, Clone)]
struct Held {
    value: Value,
    level: u8,
    /// Easing step of the value (IO at level 1).
    ease: u8,
    since: u64,
    class: QosClass,
}

/// The holds in effect and the writes that make them.
#[derive(Debug)]
pub struct Actuator {
    backend: AnyBackend,
    cpus: u32,
    disks: Vec<(u32, u32)>,
    held: BTreeMap<(String, Resource), Held>,
}

/// What one level change wrote.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Applied {
    /// `workload knob value` per write, for the event.
    pub writes: Vec<String>,
    /// Workloads touched.
    pub workloads: Vec<String>,
    /// Classes touched.
    pub classes: Vec<QosClass>,
    /// Writes the kernel refused.
    pub errors: Vec<String>,
}

impl Applied {
    /// Records one write of `knob` on `w`.
    fn wrote(&mut self, w: &Watched, knob: &str, value: &str) {
        self.writes.push(format!("{} {knob} {value}", w.id));
        self.workloads.push(w.id.clone());
        if !self.classes.contains(&w.class) {
            self.classes.push(w.class);
        }
    }
}

/// The level at which a class is first held: BestEffort at 1, Burstable at 2
/// (at 1 when there is no BestEffort workload to hold first).
fn start_level(class: QosClass, has_best_effort: bool) -> Option<u8> {
    match class {
        QosClass::BestEffort => Some(1),
        QosClass::Burstable => Some(if has_best_effort { 2 } else { 1 }),
        QosClass::Guaranteed | QosClass::GuaranteedPro => None,
    }
}

impl Actuator {
    /// An actuator for a node with `cpus` CPUs and these disks.
    pub fn new(backend: AnyBackend, cpus: u32, disks: Vec<(u32, u32)>) -> Self {
        Actuator {
            backend,
            cpus,
            disks,
            held: BTreeMap::new(),
        }
    }

    /// Knobs currently held.
    pub fn holds(&self) -> Vec<HoldView> {
        self.held
            .iter()
            .map(|((id, res), h)| HoldView {
                workload: id.clone(),
                class: h.class.to_string(),
                resource: *res,
                knob: self.knob_name(*res).to_string(),
                value: self.render(&h.value),
                since_unix_ms: h.since,
            })
            .collect()
    }

    /// The IO holds in effect: each held workload's `io.max` lines.
    pub fn io_holds(&self) -> impl Iterator<Item = (&str, &[IoMaxLine])> {
        self.held.iter().filter_map(|((id, _), h)| match &h.value {
            Value::Io(lines) => Some((id.as_str(), lines.as_slice())),
            _ => None,
        })
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    fn knob_name(&self, res: Resource) -> &'static str {
        match (res, &self.backend) {
            (Resource::Cpu, AnyBackend::V2(_)) => v2::cpu::MAX,
            (Resource::Cpu, AnyBackend::V1(_)) => v1::cpu::CFS_QUOTA_US,
            (Resource::Memory, AnyBackend::V2(_)) => v2::memory::HIGH,
            (Resource::Memory, AnyBackend::V1(_)) => v1::memory::LIMIT,
            (_, AnyBackend::V2(_)) => v2::io::MAX,
            (_, AnyBackend::V1(_)) => "blkio.throttle.*_bps_device",
        }
    }

    fn render(&self, v: &Value) -> String {
        match (v, &self.backend) {
            (Value::CpuMillis(m), AnyBackend::V2(_)) => {
                format!(
                    "{} {HOLD_PERIOD_US}, cpu.weight {HELD_CPU_WEIGHT}",
                    quota(*m)
                )
            }
            (Value::CpuMillis(m), AnyBackend::V1(_)) => {
                format!(
                    "{} (period {HOLD_PERIOD_US}), cpu.shares {HELD_CPU_SHARES}",
                    quota(*m)
                )
            }
            (Value::MemoryHigh(b), _) => b.to_string(),
            (Value::Io(lines), _) => lines
                .iter()
                .map(IoMaxLine::render)
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    /// Sets the holds of `res` for `level` on the holdable workloads of
    /// `watched`; `rates` are their latest measurements by id.
    pub fn set_level(
        &mut self,
        res: Resource,
        level: u8,
        watched: &[Watched],
        rates: &BTreeMap<String, Rates>,
    ) -> Applied {
        let mut out = Applied::default();
        // Workloads no longer holdable (class changed, removed) were rewritten by
        // the QoS service: forget their holds.
        self.held
            .retain(|(id, r), _| *r != res || watched.iter().any(|w| &w.id == id && w.holdable()));
        let has_be = watched.iter().any(|w| w.class == QosClass::BestEffort);
        let targets: Vec<(&Watched, Option<u8>)> = watched
            .iter()
            .filter(|w| w.holdable())
            .map(|w| {
                let start = start_level(w.class, has_be);
                (w, start.filter(|s| level >= *s).map(|s| level - s))
            })
            .collect();
        let n_held = targets.iter().filter(|(_, d)| d.is_some()).count().max(1) as f64;
        let floors: f64 = watched
            .iter()
            .filter(|w| w.reserved())
            .map(|w| w.floor_cpu)
            .sum();
        let total = f64::from(self.cpus) * 1000.0;
        let budget = (total - floors * 1000.0 - 0.05 * total).max(0.0);
        for (w, depth) in targets {
            let key = (w.id.clone(), res);
            let Some(depth) = depth else {
                if let Some(h) = self.held.remove(&key) {
                    self.restore_one(w, res, &h, &mut out);
                }
                continue;
            };
            let prev = self.held.get(&key).cloned();
            let value = self.value_for(
                res,
                w,
                depth,
                level,
                prev.as_ref(),
                rates.get(&w.id),
                budget / n_held,
            );
            if prev.as_ref().is_some_and(|p| p.value == value) {
                if let Some(h) = self.held.get_mut(&key)
                    && h.level != level
                {
                    h.level = level;
                    h.ease = 0;
                }
                continue;
            }
            match self.write(w, res, &value) {
                Ok(()) => {
                    out.wrote(w, self.knob_name(res), &self.render(&value));
                    let since = prev.as_ref().map_or_else(unix_ms, |p| p.since);
                    let ease = prev.filter(|p| p.level == level).map_or(0, |p| p.ease);
                    self.held.insert(
                        key,
                        Held {
                            value,
                            level,
                            ease,
                            since,
                            class: w.class,
                        },
                    );
                }
                Err(e) => out.errors.push(e),
            }
        }
        out
    }

    /// Moves the IO holds to easing step `ease`: each step widens the level-1
    /// rates by `IO_EASE_FACTOR` (never past a workload's own limit).
    pub fn set_ease(&mut self, res: Resource, ease: u8, watched: &[Watched]) -> Applied {
        let mut out = Applied::default();
        let keys: Vec<(String, Resource)> = self
            .held
            .iter()
            .filter(|((_, r), h)| *r == res && h.ease != ease && matches!(h.value, Value::Io(_)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(w) = watched.iter().find(|w| w.id == key.0) else {
                continue;
            };
            let Some(h) = self.held.get(&key) else {
                continue;
            };
            let Value::Io(lines) = &h.value else {
                continue;
            };
            let scale = IO_EASE_FACTOR.powi(i32::from(ease) - i32::from(h.ease));
            let widen = |v: Option<u64>, stat: Option<u64>| {
                v.map(|v| {
                    let v = ((v as f64 * scale) as u64).max(MIN_IO_RATE);
                    stat.map_or(v, |s| v.min(s))
                })
            };
            let value = Value::Io(
                lines
                    .iter()
                    .map(|l| IoMaxLine {
                        rbps: widen(l.rbps, w.io_read_limit),
                        wbps: widen(l.wbps, w.io_write_limit),
                        ..*l
                    })
                    .collect(),
            );
            match self.write(w, res, &value) {
                Ok(()) => {
                    out.wrote(w, self.knob_name(res), &self.render(&value));
                    if let Some(h) = self.held.get_mut(&key) {
                        h.value = value;
                        h.ease = ease;
                    }
                }
                Err(e) => out.errors.push(e),
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn value_for(
        &self,
        res: Resource,
        w: &Watched,
        depth: u8,
        level: u8,
        prev: Option<&Held>,
        r: Option<&Rates>,
        share: f64,
    ) -> Value {
        match res {
            Resource::Cpu => {
                let mut m = (share * 0.5f64.powi(i32::from(depth))) as u64;
                m = m.max(MIN_HOLD_MILLIS);
                if let Some(l) = w.cpu_limit {
                    m = m.min(l);
                }
                Value::CpuMillis(m)
            }
            Resource::Memory => {
                let usage = r.map_or(0, |r| r.memory);
                let step = MEMORY_STEP;
                let v = match prev {
                    Some(Held {
                        value: Value::MemoryHigh(h),
                        level: pl,
                        ..
                    }) if level <= *pl => h.saturating_add(2 * step),
                    Some(Held {
                        value: Value::MemoryHigh(h),
                        ..
                    }) => (*h).min(usage).saturating_sub(step),
                    // The first hold stops growth where it is: nothing above
                    // it to reclaim in this thread, the workload's next pages
                    // come out of its own.
                    _ => usage,
                };
                let mut v = v.max(w.memory_bound.max(MIN_MEMORY_HIGH));
                if let Some(h) = w.memory_high {
                    v = v.min(h);
                }
                Value::MemoryHigh(v)
            }
            Resource::Io | Resource::Pids | Resource::Network | Resource::Gpu => {
                // The same level keeps its value, eased or not (a re-assert);
                // a new level counts from the uneased one.
                let scale = match prev {
                    Some(p) if p.level == level => 1.0,
                    Some(p) => {
                        2f64.powi(i32::from(p.level) - i32::from(level))
                            / IO_EASE_FACTOR.powi(i32::from(p.ease))
                    }
                    None => 1.0,
                };
                let lines = self
                    .disks
                    .iter()
                    .map(|&(ma, mi)| {
                        let (rr, wr) = r
                            .and_then(|r| {
                                r.io.iter()
                                    .find(|d| (d.0, d.1) == (ma, mi))
                                    .map(|d| (d.2, d.3))
                            })
                            .unwrap_or((0.0, 0.0));
                        let old = match prev.map(|p| &p.value) {
                            Some(Value::Io(l)) => {
                                l.iter().find(|l| (l.major, l.minor) == (ma, mi)).copied()
                            }
                            _ => None,
                        };
                        let pick = |rate: f64, old: Option<u64>, stat: Option<u64>| {
                            let v = match (old, r) {
                                (Some(o), _) => ((o as f64) * scale) as u64,
                                // Not measured yet (its series just opened): a
                                // quarter of an unknown rate is not zero, so no
                                // hold until the next step has its rate.
                                (None, None) => return stat,
                                (None, Some(_)) => (rate / 4.0) as u64,
                            }
                            .max(MIN_IO_RATE);
                            Some(stat.map_or(v, |s| v.min(s)))
                        };
                        IoMaxLine {
                            rbps: pick(rr, old.and_then(|l| l.rbps), w.io_read_limit),
                            wbps: pick(wr, old.and_then(|l| l.wbps), w.io_write_limit),
                            ..IoMaxLine::unlimited(ma, mi)
                        }
                    })
                    .collect();
                Value::Io(lines)
            }
        }
    }

    fn paths(&self, w: &Watched, file: &str, ctrl: &str) -> Option<std::path::PathBuf> {
        match &self.backend {
            AnyBackend::V2(b) => Some(b.dir(&w.cgroup).join(file)),
            AnyBackend::V1(b) => Some(w.cgroup.under(b.mount(ctrl)?).join(file)),
        }
    }

    fn put(&self, w: &Watched, file: &str, ctrl: &str, data: &str) -> Result<(), String> {
        let path = self
            .paths(w, file, ctrl)
            .ok_or_else(|| format!("{}: no {ctrl} hierarchy", w.id))?;
        fs::write(&path, data).map_err(|e| e.to_string())
    }

    fn write(&self, w: &Watched, res: Resource, v: &Value) -> Result<(), String> {
        match (v, &self.backend) {
            (Value::CpuMillis(m), AnyBackend::V2(_)) => {
                self.put(
                    w,
                    v2::cpu::MAX,
                    "cpu",
                    &format!("{} {HOLD_PERIOD_US}", quota(*m)),
                )?;
                self.put(w, v2::cpu::WEIGHT, "cpu", &HELD_CPU_WEIGHT.to_string())
            }
            (Value::CpuMillis(m), AnyBackend::V1(_)) => {
                // Quota first when shrinking the period would leave it invalid is not
                // an issue: any quota >= 1 ms is valid with any period.
                self.put(
                    w,
                    v1::cpu::CFS_PERIOD_US,
                    "cpu",
                    &HOLD_PERIOD_US.to_string(),
                )?;
                self.put(w, v1::cpu::CFS_QUOTA_US, "cpu", &quota(*m).to_string())?;
                self.put(w, v1::cpu::SHARES, "cpu", &HELD_CPU_SHARES.to_string())
            }
            (Value::MemoryHigh(b), AnyBackend::V2(_)) => {
                self.put(w, v2::memory::HIGH, "memory", &b.to_string())
            }
            (Value::MemoryHigh(b), AnyBackend::V1(_)) => {
                self.put(w, v1::memory::LIMIT, "memory", &b.to_string())
            }
            (Value::Io(lines), AnyBackend::V2(_)) => {
                for l in lines {
                    self.put(w, v2::io::MAX, "io", &l.render())?;
                }
                Ok(())
            }
            (Value::Io(lines), AnyBackend::V1(_)) => {
                let _ = res;
                for l in lines {
                    let dev = format!("{}:{}", l.major, l.minor);
                    self.put(
                        w,
                        v1::blkio::READ_BPS_DEVICE,
                        "blkio",
                        &format!("{dev} {}", l.rbps.unwrap_or(0)),
                    )?;
                    self.put(
                        w,
                        v1::blkio::WRITE_BPS_DEVICE,
                        "blkio",
                        &format!("{dev} {}", l.wbps.unwrap_or(0)),
                    )?;
                }
                Ok(())
            }
        }
    }

    /// The static values the mapping wrote, back in place.
    fn restore_one(&self, w: &Watched, res: Resource, h: &Held, out: &mut Applied) {
        let r = match (res, &self.backend) {
            (Resource::Cpu, AnyBackend::V2(_)) => {
                let v = w.cpu_limit.map_or_else(
                    || format!("max {}", v2::cpu::DEFAULT_PERIOD_US),
                    |l| {
                        format!(
                            "{} {}",
                            crate::qos::mapping::quota_us(
                                daros_coordinator::MilliCpu(l),
                                v2::cpu::DEFAULT_PERIOD_US
                            ),
                            v2::cpu::DEFAULT_PERIOD_US
                        )
                    },
                );
                self.put(w, v2::cpu::MAX, "cpu", &v)
                    .and_then(|()| self.put(w, v2::cpu::WEIGHT, "cpu", &w.cpu_weight.to_string()))
                    .map(|()| format!("{} cpu.max {v}, cpu.weight {}", w.id, w.cpu_weight))
            }
            (Resource::Cpu, AnyBackend::V1(_)) => {
                let q = w.cpu_limit.map_or_else(
                    || "-1".to_string(),
                    |l| {
                        crate::qos::mapping::quota_us(
                            daros_coordinator::MilliCpu(l),
                            v2::cpu::DEFAULT_PERIOD_US,
                        )
                        .to_string()
                    },
                );
                self.put(w, v1::cpu::CFS_QUOTA_US, "cpu", "-1")
                    .and_then(|()| {
                        self.put(
                            w,
                            v1::cpu::CFS_PERIOD_US,
                            "cpu",
                            &v2::cpu::DEFAULT_PERIOD_US.to_string(),
                        )
                    })
                    .and_then(|()| self.put(w, v1::cpu::CFS_QUOTA_US, "cpu", &q))
                    .and_then(|()| self.put(w, v1::cpu::SHARES, "cpu", &w.cpu_weight.to_string()))
                    .map(|()| format!("{} cpu.cfs_quota_us {q}, cpu.shares {}", w.id, w.cpu_weight))
            }
            (Resource::Memory, AnyBackend::V2(_)) => {
                let v = w
                    .memory_high
                    .map_or_else(|| "max".to_string(), |b| b.to_string());
                self.put(w, v2::memory::HIGH, "memory", &v)
                    .map(|()| format!("{} memory.high {v}", w.id))
            }
            (Resource::Memory, AnyBackend::V1(_)) => {
                let v = w
                    .memory_high
                    .map_or_else(|| "-1".to_string(), |b| b.to_string());
                self.put(w, v1::memory::LIMIT, "memory", &v)
                    .map(|()| format!("{} memory.limit_in_bytes {v}", w.id))
            }
            (_, AnyBackend::V2(_)) => {
                let mut last = Ok(String::new());
                for &(ma, mi) in &self.disks {
                    let l = IoMaxLine {
                        rbps: w.io_read_limit,
                        wbps: w.io_write_limit,
                        ..IoMaxLine::unlimited(ma, mi)
                    };
                    last = self
                        .put(w, v2::io::MAX, "io", &l.render())
                        .map(|()| format!("{} io.max {}", w.id, l.render()));
                    if last.is_err() {
                        break;
                    }
                }
                last
            }
            (_, AnyBackend::V1(_)) => {
                let mut last = Ok(String::new());
                for &(ma, mi) in &self.disks {
                    let dev = format!("{ma}:{mi}");
                    last = self
                        .put(
                            w,
                            v1::blkio::READ_BPS_DEVICE,
                            "blkio",
                            &format!("{dev} {}", w.io_read_limit.unwrap_or(0)),
                        )
                        .and_then(|()| {
                            self.put(
                                w,
                                v1::blkio::WRITE_BPS_DEVICE,
                                "blkio",
                                &format!("{dev} {}", w.io_write_limit.unwrap_or(0)),
                            )
                        })
                        .map(|()| format!("{} blkio.throttle {dev} restored", w.id));
                    if last.is_err() {
                        break;
                    }
                }
                last
            }
        };
        let _ = h;
        match r {
            Ok(text) => {
                out.writes.push(text);
                out.workloads.push(w.id.clone());
                if !out.classes.contains(&w.class) {
                    out.classes.push(w.class);
                }
            }
            // A workload removed meanwhile has nothing to restore.
            Err(e) => out.errors.push(e),
        }
    }

    /// Releases every hold of `res` (level 0); holds of workloads no longer
    /// watched are dropped without writes.
    pub fn release_all(&mut self, res: Resource, watched: &[Watched]) -> Applied {
        let mut out = Applied::default();
        let keys: Vec<(String, Resource)> =
            self.held.keys().filter(|k| k.1 == res).cloned().collect();
        for key in keys {
            let Some(h) = self.held.remove(&key) else {
                continue;
            };
            if let Some(w) = watched.iter().find(|w| w.id == key.0) {
                self.restore_one(w, res, &h, &mut out);
            }
        }
        out
    }
}

fn quota(millis: u64) -> u64 {
    (millis * HOLD_PERIOD_US / 1000).max(crate::qos::mapping::MIN_QUOTA_US)
}
