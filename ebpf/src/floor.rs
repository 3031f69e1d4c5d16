//! `NetFloorController`: keeps network MinimalReservations (floors) by capping BestEffort, then
//! Burstable traffic whenever their demand would eat into the floors, and lifting the caps
//! (with hysteresis) when it would not. Pure: no I/O, time comes in as an argument, the caps
//! currently enforced come in as input (the maps are the source of truth, so a restarted agent
//! continues where the previous one stopped).
//!
//! Per direction, every tick:
//! - `reserved` = for each floor workload, `max(floor, rate)` while it is active (sent or
//!   received more than `active_bps` within `idle_after`), else its rate; plus the rates of
//!   Guaranteed workloads without a floor (never capped here).
//! - `budget` = `capacity * (1 - headroom) - reserved`: what Burstable and BestEffort may use.
//! - If their demand exceeds the budget, the budget is shared max-min fairly: Burstable first,
//!   what is left to BestEffort, never below `min_cap_bps` each. A capped workload running at
//!   90 % or more of its cap counts as wanting more.
//! - Caps are lifted once the budget covers their demand twice over, or no floor is active, for
//!   `lift_after` without interruption.
//! - While caps are in force and hold the capped classes to their budget, an active floor
//!   workload below its floor on a link that carries what it is thought to carry means the link
//!   carries less than the configured capacity says (framing the counters do not see, a shaper
//!   downstream, a CPU-bound path): a `shortfall reserve` then grows (by `SHORTFALL_GROWTH` of
//!   the capacity per second, at most `SHORTFALL_MAX`) and is taken from the budget, and decays
//!   once every floor is met. Rates for this judgement are smoothed over `SMOOTH_NS`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::{cgroup::CgroupId, net::Direction};

/// QoS class of a workload, as far as network floors are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NetClass {
    /// Guaranteed with MinimalReservation: may hold floors; never capped by this controller.
    GuaranteedPro,
    /// May hold floors; never capped by this controller.
    Guaranteed,
    /// Capped after BestEffort when floors need it.
    Burstable,
    /// Capped first.
    BestEffort,
}

impl NetClass {
    fn protected(self) -> bool {
        matches!(self, Self::GuaranteedPro | Self::Guaranteed)
    }
}

/// A workload known to the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloorWorkload {
    /// Its cgroup (registered with the datapath).
    pub cgroup: CgroupId,
    /// Its class.
    pub class: NetClass,
    /// Egress floor in bytes/s.
    #[serde(default)]
    pub egress_floor_bps: Option<u64>,
    /// Ingress floor in bytes/s.
    #[serde(default)]
    pub ingress_floor_bps: Option<u64>,
}

impl FloorWorkload {
    fn floor(&self, dir: Direction) -> Option<u64> {
        match dir {
            Direction::Egress => self.egress_floor_bps,
            Direction::Ingress => self.ingress_floor_bps,
        }
        .filter(|f| *f > 0)
    }
}

/// Node parameters of the controller.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FloorConfig {
    /// Egress capacity of the node in bytes/s (0: egress floors are not enforced).
    pub egress_capacity_bps: u64,
    /// Ingress capacity of the node in bytes/s (0: ingress floors are not enforced).
    pub ingress_capacity_bps: u64,
    /// Fraction of the capacity never handed out. The counters see TSO/GSO skbs at L3; on
    /// the wire every MSS-sized segment also carries its own IP/TCP headers and Ethernet
    /// framing (~6% at MTU 1500), and rates are estimated over 30 ms.
    pub headroom: f64,
    /// A floor workload above this rate is active.
    pub active_bps: u64,
    /// A floor stays reserved this long after its workload was last active, in ms.
    pub idle_after_ms: u64,
    /// Caps are lifted after the need for them has been gone this long, in ms.
    pub lift_after_ms: u64,
    /// No cap goes below this, so capped workloads keep a trickle, in bytes/s.
    pub min_cap_bps: u64,
}

impl Default for FloorConfig {
    fn default() -> Self {
        Self {
            egress_capacity_bps: 0,
            ingress_capacity_bps: 0,
            headroom: 0.10,
            active_bps: 64 * 1024,
            idle_after_ms: 500,
            lift_after_ms: 1000,
            min_cap_bps: 128 * 1024,
        }
    }
}

impl FloorConfig {
    fn capacity(&self, dir: Direction) -> u64 {
        match dir {
            Direction::Egress => self.egress_capacity_bps,
            Direction::Ingress => self.ingress_capacity_bps,
        }
    }
}

/// Why a configuration or workload set was refused (the previous one stays in force).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FloorError {
    /// `headroom` outside `[0, 0.5]`.
    #[error("floor config headroom = {0}: must be between 0 and 0.5")]
    Headroom(f64),
    /// A floor on a class that this controller caps.
    #[error(
        "workload {cgroup}: {dir} floor on class {class:?}; floors need class Guaranteed or GuaranteedPro"
    )]
    FloorOnCappedClass {
        /// The workload.
        cgroup: CgroupId,
        /// Direction.
        dir: &'static str,
        /// Its class.
        class: NetClass,
    },
    /// Floors add up to more than the capacity can give.
    #[error(
        "{dir} floors add up to {sum} bytes/s, more than the {usable} bytes/s usable of the configured capacity"
    )]
    Overcommitted {
        /// Direction.
        dir: &'static str,
        /// Sum of floors.
        sum: u64,
        /// capacity * (1 - headroom).
        usable: u64,
    },
    /// The same cgroup twice.
    #[error("workload {0} listed twice")]
    Duplicate(CgroupId),
}

/// Measured rates of one workload, bytes/s.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measured {
    /// Egress rate.
    pub egress_bps: f64,
    /// Ingress rate.
    pub ingress_bps: f64,
}

impl Measured {
    fn dir(&self, dir: Direction) -> f64 {
        match dir {
            Direction::Egress => self.egress_bps,
            Direction::Ingress => self.ingress_bps,
        }
    }
}

/// What one tick decided for one direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DirDecision {
    /// Bytes/s held for floors and uncapped classes.
    pub reserved_bps: u64,
    /// Bytes/s also held back because floors fell short on a full link (the link carries
    /// less than its configured capacity says).
    pub shortfall_reserve_bps: u64,
    /// Bytes/s left for Burstable and BestEffort.
    pub budget_bps: u64,
    /// Their measured demand.
    pub demand_bps: u64,
    /// Whether caps are in force after this tick.
    pub capping: bool,
    /// Cap per workload (only those capped).
    pub caps: BTreeMap<CgroupId, u64>,
}

/// The result of a tick: the caps to enforce, with the numbers behind them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FloorDecision {
    /// Egress.
    pub egress: DirDecision,
    /// Ingress.
    pub ingress: DirDecision,
}

impl FloorDecision {
    /// One direction.
    pub fn dir(&self, dir: Direction) -> &DirDecision {
        match dir {
            Direction::Egress => &self.egress,
            Direction::Ingress => &self.ingress,
        }
    }
}

/// Time constant of the smoothed rates the shortfall reserve is judged on.
const SMOOTH_NS: f64 = 100e6;
/// The shortfall reserve grows by this fraction of the capacity per second...
const SHORTFALL_GROWTH: f64 = 0.10;
/// ...decays by this fraction per second once every floor is met...
const SHORTFALL_DECAY: f64 = 0.02;
/// ...and never exceeds this fraction of the capacity.
const SHORTFALL_MAX: f64 = 0.25;
/// A floor workload below this share of its floor is short...
const SHORT_BELOW: f64 = 0.99;
/// ...and one at this share or more has it met.
const MET_FROM: f64 = 0.995;
/// The link counts as full from this share of the usable capacity.
const FULL_FROM: f64 = 0.95;
/// The caps count as holding while the capped classes use at most this share of their budget.
const HELD_UP_TO: f64 = 1.10;

#[derive(Clone, Debug, Default)]
struct DirState {
    capping: bool,
    /// Since when the caps could have been lifted.
    liftable_since_ns: Option<u64>,
    /// Bytes/s taken from the budget because floors fell short on a full link.
    shortfall_reserve: f64,
    /// Smoothed rate of all workloads in this direction.
    total_smoothed: f64,
    /// Smoothed rate of the capped classes.
    cappable_smoothed: f64,
    /// When this direction last ticked.
    last_tick_ns: Option<u64>,
}

/// The controller. See the module documentation for the rule.
#[derive(Clone, Debug)]
pub struct NetFloorController {
    cfg: FloorConfig,
    workloads: Vec<FloorWorkload>,
    last_active_ns: BTreeMap<(CgroupId, Direction), u64>,
    /// Smoothed rates of floor workloads.
    smoothed: BTreeMap<(CgroupId, Direction), f64>,
    state: [DirState; 2],
}

impl NetFloorController {
    /// A controller with no workloads.
    pub fn new(cfg: FloorConfig) -> Result<Self, FloorError> {
        validate_cfg(&cfg)?;
        Ok(Self {
            cfg,
            workloads: Vec::new(),
            last_active_ns: BTreeMap::new(),
            smoothed: BTreeMap::new(),
            state: Default::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FloorConfig {
        &self.cfg
    }

    /// The workloads.
    pub fn workloads(&self) -> &[FloorWorkload] {
        &self.workloads
    }

    /// Replaces the configuration; refused (old one kept) if invalid or if the floors no
    /// longer fit.
    pub fn set_config(&mut self, cfg: FloorConfig) -> Result<(), FloorError> {
        validate_cfg(&cfg)?;
        validate_workloads(&cfg, &self.workloads)?;
        self.cfg = cfg;
        Ok(())
    }

    /// Replaces the workload set; refused (old set kept) if a floor is on a capped class, a
    /// cgroup is listed twice, or the floors exceed the usable capacity.
    pub fn set_workloads(&mut self, workloads: Vec<FloorWorkload>) -> Result<(), FloorError> {
        validate_workloads(&self.cfg, &workloads)?;
        let ids: BTreeSet<CgroupId> = workloads.iter().map(|w| w.cgroup).collect();
        self.last_active_ns.retain(|(id, _), _| ids.contains(id));
        self.smoothed.retain(|(id, _), _| ids.contains(id));
        self.workloads = workloads;
        Ok(())
    }

    /// One decision. `measured`: current rates; `current_caps`: the floor caps enforced now
    /// (from the maps); `now_ns`: monotonic time.
    pub fn tick(
        &mut self,
        measured: &BTreeMap<CgroupId, Measured>,
        current_caps: &BTreeMap<(CgroupId, Direction), u64>,
        now_ns: u64,
    ) -> FloorDecision {
        let mut out = FloorDecision::default();
        for dir in Direction::ALL {
            let d = self.tick_dir(dir, measured, current_caps, now_ns);
            match dir {
                Direction::Egress => out.egress = d,
                Direction::Ingress => out.ingress = d,
            }
        }
        out
    }

    fn tick_dir(
        &mut self,
        dir: Direction,
        measured: &BTreeMap<CgroupId, Measured>,
        current_caps: &BTreeMap<(CgroupId, Direction), u64>,
        now_ns: u64,
    ) -> DirDecision {
        let capacity = self.cfg.capacity(dir);
        let state_idx = dir.index();
        let rate = |id: CgroupId| measured.get(&id).map_or(0.0, |m| m.dir(dir)).max(0.0);
        let idle_after = self.cfg.idle_after_ms.saturating_mul(1_000_000);

        // Weight of this tick's rates in the smoothed ones (the first tick sets them).
        let st = &mut self.state[state_idx];
        let dt = st
            .last_tick_ns
            .map_or(0.0, |t| now_ns.saturating_sub(t) as f64);
        st.last_tick_ns = Some(now_ns);
        let alpha = if dt > 0.0 { dt / (SMOOTH_NS + dt) } else { 1.0 };
        let smooth = |old: Option<f64>, r: f64| old.map_or(r, |o| o + alpha * (r - o));

        let mut reserved = 0.0;
        let mut any_floor_active = false;
        let mut any_short = false;
        let mut all_met = true;
        let mut total = 0.0;
        for w in self.workloads.iter().filter(|w| w.class.protected()) {
            let r = rate(w.cgroup);
            total += r;
            match w.floor(dir) {
                Some(floor) => {
                    if r >= self.cfg.active_bps as f64 {
                        self.last_active_ns.insert((w.cgroup, dir), now_ns);
                    }
                    let active = self
                        .last_active_ns
                        .get(&(w.cgroup, dir))
                        .is_some_and(|t| now_ns.saturating_sub(*t) <= idle_after);
                    any_floor_active |= active;
                    reserved += if active { r.max(floor as f64) } else { r };
                    let key = (w.cgroup, dir);
                    let sm = smooth(self.smoothed.get(&key).copied(), r);
                    self.smoothed.insert(key, sm);
                    if active {
                        any_short |= sm < SHORT_BELOW * floor as f64;
                        all_met &= sm >= MET_FROM * floor as f64;
                    }
                }
                None => reserved += r,
            }
        }
        let usable = capacity as f64 * (1.0 - self.cfg.headroom);

        // Demand of the cappable classes; a workload pressing against its cap wants more.
        let mut demand_total = 0.0;
        let mut wants: Vec<(CgroupId, NetClass, f64)> = Vec::new();
        for w in self.workloads.iter().filter(|w| !w.class.protected()) {
            let r = rate(w.cgroup);
            demand_total += r;
            let want = match current_caps.get(&(w.cgroup, dir)) {
                Some(cap) if r >= 0.9 * *cap as f64 => f64::INFINITY,
                _ => r,
            };
            wants.push((w.cgroup, w.class, want));
        }
        total += demand_total;
        // (alpha is 1 on the first tick: the smoothed values start at the rates.)
        st.total_smoothed = smooth(Some(st.total_smoothed), total);
        st.cappable_smoothed = smooth(Some(st.cappable_smoothed), demand_total);

        // The shortfall reserve: only while caps are in force and holding, so a floor that is
        // short because the capped classes overrun their budget (caps not yet biting) is not
        // mistaken for a link that carries less than configured.
        let plain_budget = (usable - reserved).max(0.0);
        let secs = dt / 1e9;
        if !st.capping {
            st.shortfall_reserve = 0.0;
        } else if any_short
            && st.total_smoothed >= FULL_FROM * usable
            && st.cappable_smoothed <= HELD_UP_TO * (plain_budget - st.shortfall_reserve).max(0.0)
        {
            st.shortfall_reserve = (st.shortfall_reserve
                + SHORTFALL_GROWTH * capacity as f64 * secs)
                .min(SHORTFALL_MAX * capacity as f64);
        } else if all_met || !any_floor_active {
            st.shortfall_reserve =
                (st.shortfall_reserve - SHORTFALL_DECAY * capacity as f64 * secs).max(0.0);
        }
        let budget = (plain_budget - st.shortfall_reserve).max(0.0);

        let mut decision = DirDecision {
            reserved_bps: reserved as u64,
            shortfall_reserve_bps: st.shortfall_reserve as u64,
            budget_bps: budget as u64,
            demand_bps: demand_total as u64,
            ..DirDecision::default()
        };
        if capacity == 0 || wants.is_empty() {
            st.capping = false;
            st.liftable_since_ns = None;
            st.shortfall_reserve = 0.0;
            return decision;
        }
        if !st.capping {
            if any_floor_active && demand_total > budget {
                st.capping = true;
                st.liftable_since_ns = None;
            } else {
                return decision;
            }
        } else {
            let liftable = !any_floor_active || demand_total * 2.0 <= budget;
            if liftable {
                let since = *st.liftable_since_ns.get_or_insert(now_ns);
                if now_ns.saturating_sub(since) >= self.cfg.lift_after_ms.saturating_mul(1_000_000)
                {
                    st.capping = false;
                    st.liftable_since_ns = None;
                    return decision;
                }
            } else {
                st.liftable_since_ns = None;
            }
        }

        decision.capping = true;
        let min_cap = self.cfg.min_cap_bps as f64;
        let burstable: Vec<(CgroupId, f64)> = wants
            .iter()
            .filter(|w| w.1 == NetClass::Burstable)
            .map(|w| (w.0, w.2))
            .collect();
        let best_effort: Vec<(CgroupId, f64)> = wants
            .iter()
            .filter(|w| w.1 == NetClass::BestEffort)
            .map(|w| (w.0, w.2))
            .collect();
        // BestEffort keeps at least its trickle; Burstable shares the rest first.
        let for_burstable = (budget - min_cap * best_effort.len() as f64).max(0.0);
        let b_alloc = water_fill(for_burstable, &burstable);
        let b_fits = b_alloc
            .iter()
            .zip(&burstable)
            .all(|((_, a), (_, want))| want.is_finite() && a >= want);
        let b_used: f64 = if b_fits {
            burstable.iter().map(|(_, want)| want).sum()
        } else {
            for (id, a) in &b_alloc {
                decision.caps.insert(*id, a.max(min_cap) as u64);
            }
            b_alloc.iter().map(|(_, a)| a.max(min_cap)).sum()
        };
        let e_alloc = with_spare(
            water_fill((budget - b_used).max(0.0), &best_effort),
            budget - b_used,
        );
        for (id, a) in e_alloc {
            decision.caps.insert(id, a.max(min_cap) as u64);
        }
        decision
    }
}

/// Max-min fair split of `budget` over demands (`INFINITY` = wants all it can get).
fn water_fill(budget: f64, demands: &[(CgroupId, f64)]) -> Vec<(CgroupId, f64)> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by(|a, b| demands[*a].1.total_cmp(&demands[*b].1));
    let mut left = budget.max(0.0);
    let mut alloc = vec![0.0; demands.len()];
    for (k, &i) in order.iter().enumerate() {
        let a = demands[i].1.min(left / (order.len() - k) as f64);
        alloc[i] = a;
        left -= a;
    }
    demands
        .iter()
        .zip(alloc)
        .map(|((id, _), a)| (*id, a))
        .collect()
}

/// Hands what an allocation leaves of `budget` to everyone equally, so a workload below its
/// share can still grow until the next tick sees it.
fn with_spare(alloc: Vec<(CgroupId, f64)>, budget: f64) -> Vec<(CgroupId, f64)> {
    let used: f64 = alloc.iter().map(|(_, a)| a).sum();
    let spare = (budget - used).max(0.0) / alloc.len().max(1) as f64;
    alloc.into_iter().map(|(id, a)| (id, a + spare)).collect()
}

fn validate_cfg(cfg: &FloorConfig) -> Result<(), FloorError> {
    if !(0.0..=0.5).contains(&cfg.headroom) {
        return Err(FloorError::Headroom(cfg.headroom));
    }
    Ok(())
}

fn validate_workloads(cfg: &FloorConfig, workloads: &[FloorWorkload]) -> Result<(), FloorError> {
    let mut seen = BTreeSet::new();
    for w in workloads {
        if !seen.insert(w.cgroup) {
            return Err(FloorError::Duplicate(w.cgroup));
        }
        for dir in Direction::ALL {
            if w.floor(dir).is_some() && !w.class.protected() {
                return Err(FloorError::FloorOnCappedClass {
                    cgroup: w.cgroup,
                    dir: dir.as_str(),
                    class: w.class,
                });
            }
        }
    }
    for dir in Direction::ALL {
        let sum: u64 = workloads.iter().filter_map(|w| w.floor(dir)).sum();
        let usable = (cfg.capacity(dir) as f64 * (1.0 - cfg.headroom)) as u64;
        if sum > 0 && sum > usable {
            return Err(FloorError::Overcommitted {
                dir: dir.as_str(),
                sum,
                usable,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;
    const TICK: u64 = 10_000_000;
    const F: CgroupId = CgroupId(10);
    const BE: CgroupId = CgroupId(20);
    const BU: CgroupId = CgroupId(30);

    fn ctl() -> NetFloorController {
        let cfg = FloorConfig {
            egress_capacity_bps: 200 * MB,
            ingress_capacity_bps: 200 * MB,
            headroom: 0.05,
            ..FloorConfig::default()
        };
        let mut c = NetFloorController::new(cfg).unwrap();
        c.set_workloads(vec![
            FloorWorkload {
                cgroup: F,
                class: NetClass::GuaranteedPro,
                egress_floor_bps: Some(80 * MB),
                ingress_floor_bps: None,
            },
            FloorWorkload {
                cgroup: BE,
                class: NetClass::BestEffort,
                egress_floor_bps: None,
                ingress_floor_bps: None,
            },
            FloorWorkload {
                cgroup: BU,
                class: NetClass::Burstable,
                egress_floor_bps: None,
                ingress_floor_bps: None,
            },
        ])
        .unwrap();
        c
    }

    fn egress(rates: &[(CgroupId, u64)]) -> BTreeMap<CgroupId, Measured> {
        rates
            .iter()
            .map(|(id, r)| {
                (
                    *id,
                    Measured {
                        egress_bps: *r as f64,
                        ingress_bps: 0.0,
                    },
                )
            })
            .collect()
    }

    fn caps(d: &FloorDecision) -> BTreeMap<(CgroupId, Direction), u64> {
        d.egress
            .caps
            .iter()
            .map(|(id, c)| ((*id, Direction::Egress), *c))
            .collect()
    }

    #[test]
    fn no_caps_while_demand_fits() {
        let mut c = ctl();
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 50 * MB), (BU, 30 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        assert!(!d.egress.capping);
        assert!(d.egress.caps.is_empty());
        assert_eq!(d.egress.budget_bps, 110 * MB);
    }

    #[test]
    fn best_effort_flood_is_capped_to_what_the_floor_leaves() {
        let mut c = ctl();
        let d = c.tick(
            &egress(&[(F, 40 * MB), (BE, 300 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        assert!(d.egress.capping);
        // usable 190, floor 80 reserved although F sends only 40 while squeezed
        assert_eq!(d.egress.reserved_bps, 80 * MB);
        let be = d.egress.caps[&BE];
        assert!((109 * MB..=110 * MB).contains(&be), "BE cap {be}");
        assert!(
            !d.egress.caps.contains_key(&F),
            "floor workloads are never capped"
        );
    }

    #[test]
    fn burstable_is_capped_only_when_best_effort_is_not_enough() {
        let mut c = ctl();
        // BE small, Burstable fits: Burstable keeps its rate uncapped, BE gets the rest
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 150 * MB), (BU, 60 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        assert!(d.egress.capping);
        assert!(!d.egress.caps.contains_key(&BU), "{:?}", d.egress.caps);
        assert!(d.egress.caps[&BE] <= 50 * MB + 1);
        // Burstable alone exceeds the budget: both capped, BE at its trickle
        let mut c = ctl();
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 150 * MB), (BU, 300 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        assert_eq!(d.egress.caps[&BE], c.config().min_cap_bps);
        let bu = d.egress.caps[&BU];
        assert!((109 * MB..=110 * MB).contains(&bu), "Burstable cap {bu}");
    }

    #[test]
    fn caps_lift_only_after_the_need_is_gone_for_lift_after() {
        let mut c = ctl();
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 300 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        let applied = caps(&d);
        // F stops: floor stays reserved for idle_after (500 ms), then caps lift after 1 s more
        let mut t = TICK;
        let mut lifted_at = None;
        while t < 3_000 * 1_000_000 {
            t += TICK;
            let d = c.tick(&egress(&[(F, 0), (BE, 110 * MB)]), &applied, t);
            if !d.egress.capping {
                lifted_at = Some(t);
                break;
            }
        }
        let lifted_at = lifted_at.expect("caps lifted");
        assert!(
            (1_500 * 1_000_000..=1_520 * 1_000_000).contains(&lifted_at),
            "lifted at {lifted_at}"
        );
    }

    #[test]
    fn flapping_demand_does_not_lift_caps() {
        let mut c = ctl();
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 300 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        let applied = caps(&d);
        for i in 2..300u64 {
            // BE alternates between pressing on its cap and pausing; F stays active
            let be = if i % 20 < 10 { 110 * MB } else { 0 };
            let d = c.tick(&egress(&[(F, 80 * MB), (BE, be)]), &applied, i * TICK);
            if i % 20 < 10 {
                assert!(d.egress.capping, "tick {i}");
            }
        }
    }

    #[test]
    fn budget_a_capped_workload_leaves_goes_to_the_one_pressing_its_cap() {
        let mut c = ctl();
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 300 * MB), (BU, 300 * MB)]),
            &BTreeMap::new(),
            TICK,
        );
        let applied = caps(&d);
        // BE uses far less than its cap: the spare budget goes to Burstable, BE keeps a floor of min_cap
        let d = c.tick(
            &egress(&[(F, 80 * MB), (BE, 0), (BU, 105 * MB)]),
            &applied,
            2 * TICK,
        );
        assert!(d.egress.capping);
        let bu = d.egress.caps[&BU];
        assert!(
            bu >= 109 * MB,
            "Burstable gets the budget BE does not use: {bu}"
        );
    }

    /// Ticks `secs` of a link that really carries `link` bytes/s (usable says 190 MB/s): the
    /// BestEffort flood takes up to its cap, F wants `f_wants` and gets at most what is left
    /// (or its share of the link while the flood is uncapped).
    /// Returns F's rates per tick and the last decision.
    fn on_a_link(
        c: &mut NetFloorController,
        (t, applied): (&mut u64, &mut BTreeMap<(CgroupId, Direction), u64>),
        secs: u64,
        link: u64,
        f_wants: u64,
    ) -> (Vec<u64>, FloorDecision) {
        let mut rates = Vec::new();
        let mut last = FloorDecision::default();
        for _ in 0..secs * 100 {
            *t += TICK;
            let be = applied
                .get(&(BE, Direction::Egress))
                .map_or(300 * MB, |cap: &u64| (*cap).min(300 * MB));
            // Uncapped, the flood takes the link's share of its demand.
            let share = (link as f64 * f_wants as f64 / (f_wants + be) as f64) as u64;
            let f = f_wants.min(link.saturating_sub(be).max(share));
            rates.push(f);
            last = c.tick(&egress(&[(F, f), (BE, be)]), applied, *t);
            *applied = caps(&last);
        }
        (rates, last)
    }

    #[test]
    fn a_floor_short_on_a_full_link_holds_back_what_it_lacks_and_lets_it_go_when_met() {
        let mut c = ctl();
        let (mut t, mut applied) = (0, BTreeMap::new());
        // The link carries 185 MB/s, not the 190 usable: with the flood at its 110 MB/s cap
        // the floor workload would get 75 of its 80.
        let (f, d) = on_a_link(&mut c, (&mut t, &mut applied), 4, 185 * MB, 80 * MB);
        let reserve = d.egress.shortfall_reserve_bps;
        assert!(
            (3 * MB..=10 * MB).contains(&reserve),
            "reserve {reserve} (the 5 MB/s the link lacks, give or take the band)"
        );
        let last_2s = &f[200..];
        let mean = last_2s.iter().sum::<u64>() as f64 / last_2s.len() as f64;
        assert!(mean >= 0.98 * 80e6, "floor workload at {mean} of 80 MB/s");
        assert!(d.egress.caps[&BE] <= 107 * MB, "{:?}", d.egress.caps);
        // The link recovers its capacity: the floor is met and the reserve decays to nothing.
        let (f, d) = on_a_link(&mut c, (&mut t, &mut applied), 6, 190 * MB, 80 * MB);
        assert_eq!(d.egress.shortfall_reserve_bps, 0);
        assert!(f.iter().all(|r| *r == 80 * MB));
        assert!(d.egress.caps[&BE] >= 109 * MB, "{:?}", d.egress.caps);
    }

    #[test]
    fn a_floor_used_below_its_floor_by_choice_holds_nothing_back() {
        let mut c = ctl();
        let (mut t, mut applied) = (0, BTreeMap::new());
        // F sends 40 of its 80: the link is not full (40 + 110 of 190), nothing is short of
        // what the link could give it.
        let (f, d) = on_a_link(&mut c, (&mut t, &mut applied), 3, 190 * MB, 40 * MB);
        // (the first tick, before the cap, it gets its share of the link)
        assert!(f.iter().skip(1).all(|r| *r == 40 * MB));
        assert_eq!(d.egress.shortfall_reserve_bps, 0);
        assert!(d.egress.caps[&BE] >= 109 * MB, "{:?}", d.egress.caps);
    }

    #[test]
    fn bad_sets_are_refused_and_the_old_one_kept() {
        let mut c = ctl();
        let before = c.workloads().to_vec();
        let e = c
            .set_workloads(vec![FloorWorkload {
                cgroup: BE,
                class: NetClass::BestEffort,
                egress_floor_bps: Some(MB),
                ingress_floor_bps: None,
            }])
            .unwrap_err();
        assert!(
            e.to_string().contains("floors need class Guaranteed"),
            "{e}"
        );
        let e = c
            .set_workloads(vec![FloorWorkload {
                cgroup: F,
                class: NetClass::Guaranteed,
                egress_floor_bps: Some(300 * MB),
                ingress_floor_bps: None,
            }])
            .unwrap_err();
        assert!(
            e.to_string().contains("egress floors add up to 300000000"),
            "{e}"
        );
        let dup = FloorWorkload {
            cgroup: F,
            class: NetClass::Guaranteed,
            egress_floor_bps: None,
            ingress_floor_bps: None,
        };
        assert_eq!(
            c.set_workloads(vec![dup, dup]).unwrap_err(),
            FloorError::Duplicate(F)
        );
        assert_eq!(c.workloads(), before.as_slice());
        let e = c
            .set_config(FloorConfig {
                headroom: 0.9,
                ..*c.config()
            })
            .unwrap_err();
        assert!(e.to_string().contains("headroom = 0.9"), "{e}");
        let e = c
            .set_config(FloorConfig {
                egress_capacity_bps: 50 * MB,
                ..*c.config()
            })
            .unwrap_err();
        assert!(matches!(e, FloorError::Overcommitted { .. }), "{e}");
    }

    #[test]
    fn water_fill_is_max_min_fair() {
        let a = water_fill(
            100.0,
            &[(F, 10.0), (BE, f64::INFINITY), (BU, f64::INFINITY)],
        );
        assert_eq!(a, vec![(F, 10.0), (BE, 45.0), (BU, 45.0)]);
        let a = water_fill(100.0, &[(F, 10.0), (BE, 20.0)]);
        assert_eq!(a, vec![(F, 10.0), (BE, 20.0)]);
        assert_eq!(with_spare(a, 100.0), vec![(F, 45.0), (BE, 55.0)]);
    }
}
