//! The decision part of the protection loop, pure: per resource, a hold level
//! that rises while a reserved workload's floor is threatened and falls, one
//! step at a time, after the reserved workloads have been comfortable for the
//! hold time. Level 1 holds BestEffort; level 2 adds Burstable; higher levels
//! tighten both. A threat that returns soon after a release doubles the hold
//! time (flap backoff). Time is passed in.

use std::time::Duration;

/// Thresholds and timings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyConfig {
    /// A floor is threatened below this share of it (with stall)...
    pub threat_ratio: f64,
    /// ...while the workload stalls at least this share of the time.
    pub stall_hold: f64,
    /// The floor counts as restored at or above this share of it.
    pub restored_ratio: f64,
    /// A reserved workload is comfortable at or above this share of its floor...
    pub comfortable_ratio: f64,
    /// ...or stalling less than this share of the time.
    pub stall_release: f64,
    /// Time between two escalations while the threat persists (the effect of a
    /// hold must have had time to show in the measurement window).
    pub escalate_after: Duration,
    /// Comfortable time before each release step.
    pub hold_time: Duration,
    /// Longest hold time after flap backoff.
    pub max_hold_time: Duration,
    /// A threat this soon after a release doubles the hold time.
    pub flap_window: Duration,
    /// Highest level.
    pub max_level: u8,
    /// Widening steps of a level-1 hold before it is released (0: released at
    /// once).
    pub ease_steps: u8,
    /// An easing step let a floor slip when the workload falls below this
    /// share of it (with stall).
    pub slip_ratio: f64,
    /// A fully eased level-1 hold is kept, not released, while a reserved
    /// workload still uses at least this share of its floor (0: released
    /// after the last step, as every other hold).
    pub keep_ratio: f64,
    /// A slip counts only once it has lasted this long (0: at once). A
    /// reader held at its floor dips below the slip ratio now and then by
    /// itself; taken back at every dip, a hold never reached its last step.
    pub slip_confirm: Duration,
    /// A level-1 hold widens only while the held workloads use at least this
    /// share of it on average since its last change (0: always). Below it even
    /// the step before covered their mean rate: a wider hold gives them
    /// nothing lasting and lets their surges through.
    pub widen_use: f64,
    /// An easing step that let a floor slip (or a surge through) is not tried
    /// again for this long, doubled each time the same step fails again (0:
    /// tried again as soon as the step below has held for the hold time). Each
    /// try costs the reserved workload the seconds before the loop reacts.
    pub reprobe_after: Duration,
}

/// The repeated-failure doubling of [`PolicyConfig::reprobe_after`] stops here.
const MAX_REPROBE_DOUBLINGS: u32 = 4;

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            threat_ratio: 0.98,
            stall_hold: 0.05,
            restored_ratio: 0.95,
            comfortable_ratio: 1.10,
            stall_release: 0.02,
            escalate_after: Duration::from_millis(100),
            hold_time: Duration::from_secs(2),
            max_hold_time: Duration::from_secs(120),
            flap_window: Duration::from_secs(10),
            max_level: 6,
            ease_steps: 0,
            slip_ratio: 0.95,
            keep_ratio: 0.0,
            slip_confirm: Duration::ZERO,
            widen_use: 0.0,
            reprobe_after: Duration::ZERO,
        }
    }
}

/// One reserved workload's view of one resource at one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorObs {
    /// Workload id.
    pub id: String,
    /// Its floor (cores, bytes or bytes/s).
    pub floor: f64,
    /// What it got over the window.
    pub usage: f64,
    /// Share of the window it stalled on this resource (PSI `some`).
    pub stall: f64,
    /// What threatens it, in words, where "at N% of its floor" would not say
    /// (the node's own reclaim).
    pub why: Option<String>,
}

impl FloorObs {
    pub(super) fn threatened(&self, c: &PolicyConfig) -> bool {
        self.floor > 0.0 && self.usage < c.threat_ratio * self.floor && self.stall >= c.stall_hold
    }
    fn slipped(&self, c: &PolicyConfig) -> bool {
        self.usage < c.slip_ratio * self.floor && self.stall >= c.stall_release
    }
    fn restored(&self, c: &PolicyConfig) -> bool {
        self.usage >= c.restored_ratio * self.floor || self.stall < c.stall_release
    }
    pub(super) fn comfortable(&self, c: &PolicyConfig) -> bool {
        self.usage >= c.comfortable_ratio * self.floor || self.stall < c.stall_release
    }
    /// Still using its resource, so a fully eased hold stays.
    fn active(&self, c: &PolicyConfig) -> bool {
        c.keep_ratio > 0.0 && self.usage >= c.keep_ratio * self.floor
    }
}

/// What changed at a tick.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Holding started at level 1.
    Hold {
        /// Which floor, in words.
        why: String,
    },
    /// The level rose.
    Tighten {
        /// New level.
        level: u8,
        /// Which floor, in words.
        why: String,
    },
    /// The level fell by one (0: every hold released).
    Release {
        /// New level.
        level: u8,
    },
    /// The level-1 hold moved to this easing step: wider than the step
    /// before (`wider`), or back after a step that let a floor slip.
    Ease {
        /// New step (0: the hold as first set).
        step: u8,
        /// Widened (true) or taken back (false).
        wider: bool,
    },
    /// The level-1 hold reached its last easing step, or one its held
    /// workloads do not use enough to widen (`widen_use`), with a reserved
    /// workload still active: it stays there until that workload is idle.
    Kept {
        /// The easing step it stays at.
        step: u8,
        /// Which workload, in words.
        why: String,
    },
    /// The threatened floors are back above `restored_ratio` after the loop acted.
    Restored {
        /// From the first tick that saw the threat.
        after: Duration,
    },
}

/// Hold state of one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourcePolicy {
    level: u8,
    last_change: Duration,
    threat_since: Option<Duration>,
    acted: bool,
    calm_since: Option<Duration>,
    last_release: Option<Duration>,
    last_threat: Option<Duration>,
    hold_time: Duration,
    ease: u8,
    kept: bool,
    idle_since: Option<Duration>,
    slip_since: Option<Duration>,
    /// The widest easing step that last held (before the one a threat or a
    /// slip took back): once calm again the hold returns to it in one step.
    good: u8,
    /// The last easing step that failed (let a floor slip or a surge through).
    failed: Option<Failed>,
}

/// An easing step that failed: when, and how many times in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Failed {
    step: u8,
    at: Duration,
    times: u32,
}

impl Failed {
    /// Whether widening to `step` waits, at `now`.
    fn blocks(&self, c: &PolicyConfig, step: u8, now: Duration) -> bool {
        step >= self.step && now.saturating_sub(self.at) < self.wait(c)
    }

    fn wait(&self, c: &PolicyConfig) -> Duration {
        c.reprobe_after * 2u32.pow(self.times.saturating_sub(1).min(MAX_REPROBE_DOUBLINGS))
    }
}

impl ResourcePolicy {
    /// No holds.
    pub fn new(c: &PolicyConfig) -> Self {
        ResourcePolicy {
            level: 0,
            last_change: Duration::ZERO,
            threat_since: None,
            acted: false,
            calm_since: None,
            last_release: None,
            last_threat: None,
            hold_time: c.hold_time,
            ease: 0,
            kept: false,
            idle_since: None,
            slip_since: None,
            good: 0,
            failed: None,
        }
    }

    /// Current level (0: nothing held).
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Current easing step of a level-1 hold.
    pub fn ease(&self) -> u8 {
        self.ease
    }

    /// Current hold time (after backoff).
    pub fn hold_time(&self) -> Duration {
        self.hold_time
    }

    /// The current easing step let a floor slip or a surge through at `now`.
    fn fail(&mut self, now: Duration) {
        let times = match self.failed {
            Some(f) if f.step == self.ease => f.times + 1,
            _ => 1,
        };
        self.failed = Some(Failed {
            step: self.ease,
            at: now,
            times,
        });
    }

    /// Advances to `now` with this tick's observations of every reserved workload.
    pub fn step(&mut self, c: &PolicyConfig, now: Duration, obs: &[FloorObs]) -> Vec<Change> {
        self.step_using(c, now, obs, None)
    }

    /// [`Self::step`] knowing the mean share of their hold the held workloads
    /// used since its last change (`None`: not known, so not limiting).
    pub fn step_using(
        &mut self,
        c: &PolicyConfig,
        now: Duration,
        obs: &[FloorObs],
        held_use: Option<f64>,
    ) -> Vec<Change> {
        let mut out = Vec::new();
        let threat: Vec<&FloorObs> = obs.iter().filter(|o| o.threatened(c)).collect();
        if let Some(t) = threat.first() {
            let why = t.why.clone().unwrap_or_else(|| {
                format!(
                    "{} at {:.0}% of its floor, stalled {:.0}% of the time",
                    t.id,
                    100.0 * t.usage / t.floor,
                    100.0 * t.stall
                )
            });
            self.calm_since = None;
            self.kept = false;
            self.slip_since = None;
            // Backoff resets after a long quiet spell.
            if self
                .last_threat
                .is_none_or(|l| now.saturating_sub(l) > c.flap_window * 10)
            {
                self.hold_time = c.hold_time;
            }
            self.last_threat = Some(now);
            if self.threat_since.is_none() {
                self.threat_since = Some(now);
                self.acted = false;
            }
            if self.level == 0 {
                if self
                    .last_release
                    .is_some_and(|r| now.saturating_sub(r) <= c.flap_window)
                {
                    self.hold_time = (self.hold_time * 2).min(c.max_hold_time);
                }
                self.level = 1;
                self.ease = 0;
                self.good = 0;
                self.failed = None;
                self.last_change = now;
                self.acted = true;
                out.push(Change::Hold { why });
            } else if self.ease > 0 {
                // The widening went too far: back to the hold as first set at
                // once (a surge is on), and to the step before this one once
                // calm again.
                self.good = self.ease - 1;
                self.fail(now);
                self.ease = 0;
                self.hold_time = (self.hold_time * 2).min(c.max_hold_time);
                self.last_change = now;
                self.acted = true;
                out.push(Change::Ease {
                    step: 0,
                    wider: false,
                });
            } else if self.level < c.max_level
                && now.saturating_sub(self.last_change) >= c.escalate_after
            {
                self.level += 1;
                self.last_change = now;
                self.acted = true;
                out.push(Change::Tighten {
                    level: self.level,
                    why,
                });
            }
            return out;
        }
        if let Some(since) = self.threat_since
            && obs.iter().all(|o| o.restored(c))
        {
            self.threat_since = None;
            // Dips the loop did not act on (already at its highest level) are not episodes.
            if self.acted {
                out.push(Change::Restored {
                    after: now.saturating_sub(since),
                });
            }
        }
        if self.level == 0 {
            return out;
        }
        let slipping = self.ease > 0
            && obs.iter().any(|o| o.slipped(c))
            && now.saturating_sub(self.last_change) >= c.escalate_after;
        if !slipping {
            self.slip_since = None;
        }
        if slipping && now.saturating_sub(*self.slip_since.get_or_insert(now)) < c.slip_confirm {
            // Maybe a dip of the reader's own: judged again at the next tick,
            // and no calm time counts meanwhile.
            self.calm_since = None;
            return out;
        }
        if slipping {
            // The last widening let a floor slip (not yet a threat): one step
            // back, and wait longer before trying again.
            self.slip_since = None;
            self.fail(now);
            self.ease -= 1;
            self.good = self.good.min(self.ease);
            self.kept = false;
            self.hold_time = (self.hold_time * 2).min(c.max_hold_time);
            self.last_change = now;
            self.calm_since = None;
            out.push(Change::Ease {
                step: self.ease,
                wider: false,
            });
            return out;
        }
        if obs.iter().all(|o| o.comfortable(c)) {
            let since = *self.calm_since.get_or_insert(now);
            if now.saturating_sub(since) >= self.hold_time
                && now.saturating_sub(self.last_change) >= self.hold_time
            {
                // Back to the step that last held, or one wider while the
                // held workloads use enough of their hold for it to matter.
                let used = c.widen_use <= 0.0 || held_use.is_none_or(|u| u >= c.widen_use);
                let blocked = self
                    .failed
                    .filter(|f| self.level == 1 && f.blocks(c, self.ease + 1, now));
                if self.level == 1
                    && self.ease < c.ease_steps
                    && (self.ease < self.good || (used && blocked.is_none()))
                {
                    self.kept = false;
                    self.ease = if self.ease < self.good {
                        self.good
                    } else {
                        self.ease + 1
                    };
                    self.last_change = now;
                    self.calm_since = Some(now);
                    out.push(Change::Ease {
                        step: self.ease,
                        wider: true,
                    });
                    return out;
                }
                // Released, the held workload surges back to all its rate and
                // the floor slips within seconds: the last step (or one its
                // use does not outgrow) stays while the reserved workload
                // needs it, and until it has been idle for the hold time (a
                // reader pausing between files is not done).
                if self.level == 1 && c.ease_steps > 0 && c.keep_ratio > 0.0 {
                    if let Some(o) = obs.iter().find(|o| o.active(c)) {
                        self.idle_since = None;
                        if !self.kept {
                            self.kept = true;
                            let mut why = format!(
                                "{} still at {:.0}% of its floor",
                                o.id,
                                100.0 * o.usage / o.floor
                            );
                            if let Some(u) = held_use.filter(|_| self.ease < c.ease_steps) {
                                why.push_str(&format!(
                                    ", the held workloads at {:.0}% of their hold",
                                    100.0 * u
                                ));
                            }
                            if let Some(f) = blocked {
                                why.push_str(&format!(
                                    ", step {} let a floor slip {:.0} s ago (tried again {:.0} s after)",
                                    f.step,
                                    now.saturating_sub(f.at).as_secs_f64(),
                                    f.wait(c).as_secs_f64()
                                ));
                            }
                            out.push(Change::Kept {
                                step: self.ease,
                                why,
                            });
                        }
                        return out;
                    }
                    let idle = *self.idle_since.get_or_insert(now);
                    if now.saturating_sub(idle) < self.hold_time {
                        return out;
                    }
                } else if blocked.is_some() {
                    // Released, the hold would be wider than the step that failed.
                    return out;
                }
                self.kept = false;
                self.idle_since = None;
                self.ease = 0;
                self.good = 0;
                self.failed = None;
                self.level -= 1;
                self.last_change = now;
                self.last_release = Some(now);
                self.calm_since = Some(now);
                out.push(Change::Release { level: self.level });
            }
        } else {
            self.calm_since = None;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// As the loop judges IO: threat below 75 %, comfortable at 95 %, two
    /// easing steps.
    fn io_like() -> PolicyConfig {
        PolicyConfig {
            threat_ratio: 0.75,
            comfortable_ratio: 0.95,
            escalate_after: ms(1100),
            ease_steps: 2,
            slip_ratio: 0.9,
            ..PolicyConfig::default()
        }
    }

    fn eased(step: u8, wider: bool) -> Vec<Change> {
        vec![Change::Ease { step, wider }]
    }

    fn obs(usage: f64, stall: f64) -> Vec<FloorObs> {
        vec![FloorObs {
            id: "managed/db".into(),
            floor: 1.5,
            usage,
            stall,
            why: None,
        }]
    }

    #[test]
    fn holds_escalates_restores_and_releases_with_hysteresis() {
        let c = PolicyConfig::default();
        let mut p = ResourcePolicy::new(&c);
        assert!(
            p.step(&c, ms(0), &obs(1.5, 0.0)).is_empty(),
            "at its floor: nothing"
        );
        assert!(
            p.step(&c, ms(10), &obs(1.0, 0.0)).is_empty(),
            "below floor without stall: it does not want more"
        );
        let ch = p.step(&c, ms(20), &obs(0.7, 0.5));
        assert!(
            matches!(&ch[..], [Change::Hold { why }] if why.contains("managed/db at 47% of its floor")),
            "{ch:?}"
        );
        assert!(
            p.step(&c, ms(30), &obs(0.8, 0.5)).is_empty(),
            "escalation waits for the window"
        );
        let ch = p.step(&c, ms(120), &obs(0.9, 0.5));
        assert_eq!(p.level(), 2);
        assert!(matches!(&ch[..], [Change::Tighten { level: 2, .. }]));
        let ch = p.step(&c, ms(130), &obs(1.48, 0.4));
        assert_eq!(ch, vec![Change::Restored { after: ms(110) }]);
        // Above the floor but not comfortable (still stalled, < 110%): keep holding.
        for t in (140..5000).step_by(10) {
            assert!(p.step(&c, ms(t), &obs(1.6, 0.3)).is_empty());
        }
        assert_eq!(p.level(), 2);
        // The reserved workload calms down: one release step per hold time.
        assert!(p.step(&c, ms(5000), &obs(0.2, 0.0)).is_empty());
        assert_eq!(
            p.step(&c, ms(7000), &obs(0.2, 0.0)),
            vec![Change::Release { level: 1 }]
        );
        assert!(p.step(&c, ms(8000), &obs(0.2, 0.0)).is_empty());
        assert_eq!(
            p.step(&c, ms(9000), &obs(0.2, 0.0)),
            vec![Change::Release { level: 0 }]
        );
        assert!(p.step(&c, ms(20_000), &obs(0.2, 0.0)).is_empty());
    }

    #[test]
    fn a_quick_return_doubles_the_hold_time() {
        let c = PolicyConfig::default();
        let mut p = ResourcePolicy::new(&c);
        p.step(&c, ms(0), &obs(0.5, 0.5));
        p.step(&c, ms(10), &obs(1.6, 0.0));
        p.step(&c, ms(2010), &obs(1.6, 0.0));
        assert_eq!(p.level(), 0);
        p.step(&c, ms(3000), &obs(0.5, 0.5));
        assert_eq!(p.hold_time(), ms(4000), "re-held within the flap window");
        p.step(&c, ms(3010), &obs(1.6, 0.0));
        assert!(
            p.step(&c, ms(5100), &obs(1.6, 0.0)).is_empty(),
            "the doubled hold time applies"
        );
        assert_eq!(
            p.step(&c, ms(7010), &obs(1.6, 0.0)),
            vec![Change::Release { level: 0 }]
        );
        // Long quiet: back to the base hold time on the next threat.
        p.step(&c, ms(200_000), &obs(0.5, 0.5));
        assert_eq!(p.hold_time(), c.hold_time);
    }

    #[test]
    fn an_easing_hold_widens_takes_back_a_slip_and_then_releases() {
        let c = io_like();
        let fine = || obs(1.5, 0.5);
        let slipping = || obs(1.3, 0.5);
        let mut p = ResourcePolicy::new(&c);
        assert!(matches!(
            &p.step(&c, ms(0), &obs(1.0, 0.5))[..],
            [Change::Hold { .. }]
        ));
        assert!(p.step(&c, ms(100), &fine()).len() == 1, "restored");
        assert!(
            p.step(&c, ms(2000), &fine()).is_empty(),
            "not yet the hold time"
        );
        assert_eq!(p.step(&c, ms(2100), &fine()), eased(1, true));
        assert!(
            p.step(&c, ms(2500), &slipping()).is_empty(),
            "a slip is judged a full window after the step"
        );
        assert_eq!(p.step(&c, ms(3300), &slipping()), eased(0, false));
        assert_eq!(p.hold_time(), ms(4000), "and waits longer to try again");
        assert_eq!(p.level(), 1, "still held");
        assert!(p.step(&c, ms(3400), &fine()).is_empty());
        assert_eq!(p.step(&c, ms(7400), &fine()), eased(1, true));
        assert_eq!(p.step(&c, ms(11_400), &fine()), eased(2, true));
        assert_eq!(p.ease(), 2);
        // A threat on a widened hold goes back to the hold that worked.
        assert_eq!(p.step(&c, ms(11_500), &obs(1.0, 0.5)), eased(0, false));
        assert_eq!(p.level(), 1);
        assert_eq!(p.hold_time(), ms(8000));
        // Comfortable: the steps again, then the release.
        p.step(&c, ms(11_600), &fine());
        assert_eq!(p.step(&c, ms(19_600), &fine()), eased(1, true));
        assert_eq!(p.step(&c, ms(27_600), &fine()), eased(2, true));
        assert_eq!(
            p.step(&c, ms(35_600), &fine()),
            vec![Change::Release { level: 0 }]
        );
        assert_eq!((p.level(), p.ease()), (0, 0));
    }

    #[test]
    fn a_slip_counts_once_it_has_lasted_the_confirmation_time() {
        let c = PolicyConfig {
            slip_confirm: ms(1000),
            ..io_like()
        };
        let fine = || obs(1.5, 0.5);
        let slipping = || obs(1.3, 0.5);
        let mut p = ResourcePolicy::new(&c);
        p.step(&c, ms(0), &obs(1.0, 0.5));
        p.step(&c, ms(100), &fine());
        assert_eq!(p.step(&c, ms(2100), &fine()), eased(1, true));
        // A dip shorter than the confirmation time: the step stays, and the
        // calm time starts again after it.
        for t in (3300..4200).step_by(100) {
            assert!(p.step(&c, ms(t), &slipping()).is_empty(), "at {t} ms");
        }
        assert!(p.step(&c, ms(4200), &fine()).is_empty());
        assert!(
            p.step(&c, ms(6100), &fine()).is_empty(),
            "the dip restarted the calm time"
        );
        assert_eq!(p.step(&c, ms(6200), &fine()), eased(2, true));
        // A slip that lasts: taken back once it has lasted 1 s.
        for t in (7400..8400).step_by(100) {
            assert!(p.step(&c, ms(t), &slipping()).is_empty(), "at {t} ms");
        }
        assert_eq!(p.step(&c, ms(8400), &slipping()), eased(1, false));
        assert_eq!(p.hold_time(), ms(4000));
    }

    #[test]
    fn a_shortfall_above_the_slip_ratio_keeps_the_easing() {
        let c = PolicyConfig {
            threat_ratio: 0.75,
            comfortable_ratio: 0.95,
            ease_steps: 4,
            slip_ratio: 0.85,
            ..PolicyConfig::default()
        };
        let mut p = ResourcePolicy::new(&c);
        p.step(&c, ms(0), &obs(1.0, 0.5));
        p.step(&c, ms(100), &obs(1.5, 0.5));
        assert_eq!(p.step(&c, ms(2100), &obs(1.5, 0.5)), eased(1, true));
        // 90 % of the floor: not comfortable (no further step), not a slip.
        for t in (2200..10_000).step_by(100) {
            assert!(p.step(&c, ms(t), &obs(1.35, 0.5)).is_empty());
        }
        assert_eq!(p.ease(), 1);
        // 80 %: a slip.
        assert_eq!(p.step(&c, ms(10_000), &obs(1.2, 0.5)), eased(0, false));
    }

    #[test]
    fn a_fully_eased_hold_stays_while_the_reader_reads_and_ends_once_it_is_idle() {
        let c = PolicyConfig {
            threat_ratio: 0.75,
            comfortable_ratio: 0.95,
            ease_steps: 2,
            slip_ratio: 0.85,
            keep_ratio: 0.25,
            ..PolicyConfig::default()
        };
        let mut p = ResourcePolicy::new(&c);
        p.step(&c, ms(0), &obs(1.0, 0.5));
        p.step(&c, ms(100), &obs(1.5, 0.5));
        let mut changes = Vec::new();
        for t in (200..60_000).step_by(100) {
            changes.extend(p.step(&c, ms(t), &obs(1.5, 0.5)));
        }
        assert_eq!(changes.len(), 3, "two steps and one kept: {changes:?}");
        assert!(
            matches!(&changes[2], Change::Kept { step: 2, why } if why.contains("managed/db still at 100% of its floor")),
            "{changes:?}"
        );
        assert_eq!((p.level(), p.ease()), (1, 2), "kept at the last step");
        // A pause shorter than the hold time keeps it, with no second event.
        for t in (60_000..61_500).step_by(100) {
            assert!(p.step(&c, ms(t), &obs(0.0, 0.0)).is_empty());
        }
        assert!(p.step(&c, ms(61_500), &obs(1.5, 0.5)).is_empty());
        // Idle for the hold time: released.
        let mut released = None;
        for t in (61_600..70_000).step_by(100) {
            if p.step(&c, ms(t), &obs(0.1, 0.0)) == vec![Change::Release { level: 0 }] {
                released = Some(t);
                break;
            }
        }
        assert_eq!(released, Some(63_600), "2 s after its last read");
        assert_eq!((p.level(), p.ease()), (0, 0));
    }

    #[test]
    fn a_hold_its_workloads_do_not_outgrow_is_kept_not_widened() {
        let c = PolicyConfig {
            threat_ratio: 0.75,
            comfortable_ratio: 0.95,
            ease_steps: 4,
            slip_ratio: 0.85,
            keep_ratio: 0.25,
            widen_use: 0.6,
            ..PolicyConfig::default()
        };
        let fine = || obs(1.5, 0.5);
        let mut p = ResourcePolicy::new(&c);
        p.step_using(&c, ms(0), &obs(1.0, 0.5), None);
        p.step_using(&c, ms(100), &fine(), None);
        // The held workload reads at 90 % of its hold: widened.
        assert_eq!(
            p.step_using(&c, ms(2100), &fine(), Some(0.9)),
            eased(1, true)
        );
        // At 40 % of the wider one: kept there, saying why.
        let ch = p.step_using(&c, ms(4100), &fine(), Some(0.4));
        assert!(
            matches!(&ch[..], [Change::Kept { step: 1, why }] if why.contains("held workloads at 40% of their hold")),
            "{ch:?}"
        );
        for t in (4200..20_000).step_by(100) {
            assert!(p.step_using(&c, ms(t), &fine(), Some(0.4)).is_empty());
        }
        assert_eq!(p.ease(), 1);
        // It grows into its hold: widened again.
        assert_eq!(
            p.step_using(&c, ms(20_000), &fine(), Some(0.7)),
            eased(2, true)
        );
        // Not known (nothing measured): as without the rule.
        assert_eq!(p.step_using(&c, ms(22_000), &fine(), None), eased(3, true));
        // The reader idle for the hold time: released from a kept step too.
        assert!(matches!(
            &p.step_using(&c, ms(24_000), &fine(), Some(0.1))[..],
            [Change::Kept { step: 3, .. }]
        ));
        assert!(
            p.step_using(&c, ms(24_100), &obs(0.0, 0.0), Some(0.1))
                .is_empty()
        );
        assert_eq!(
            p.step_using(&c, ms(26_100), &obs(0.0, 0.0), Some(0.1)),
            vec![Change::Release { level: 0 }]
        );
    }

    /// A hold set at 0 ms, restored at 100 ms and eased one step per 2 s hold
    /// time to step 3 at 6.1 s.
    fn eased_to_step_3(c: &PolicyConfig) -> ResourcePolicy {
        let mut p = ResourcePolicy::new(c);
        p.step(c, ms(0), &obs(1.0, 0.5));
        p.step(c, ms(100), &obs(1.5, 0.5));
        for (t, s) in [(2100, 1), (4100, 2), (6100, 3)] {
            assert_eq!(
                p.step(c, ms(t), &obs(1.5, 0.5)),
                eased(s, true),
                "at {t} ms"
            );
        }
        p
    }

    #[test]
    fn after_a_threat_the_hold_returns_to_the_step_that_held_in_one_go() {
        let c = PolicyConfig {
            ease_steps: 4,
            ..io_like()
        };
        let fine = || obs(1.5, 0.5);
        let mut p = eased_to_step_3(&c);
        // Step 3 lets a surge through: the hold as first set at once...
        assert_eq!(p.step(&c, ms(6500), &obs(1.0, 0.5)), eased(0, false));
        assert_eq!(p.hold_time(), ms(4000));
        // ...and step 2, which held, after the (doubled) hold time.
        assert_eq!(
            p.step(&c, ms(6600), &fine()),
            vec![Change::Restored { after: ms(100) }]
        );
        assert!(p.step(&c, ms(10_500), &fine()).is_empty());
        assert_eq!(p.step(&c, ms(10_600), &fine()), eased(2, true));
        // Further only one step at a time.
        assert_eq!(p.step(&c, ms(14_600), &fine()), eased(3, true));
        // A slip takes one step back; a threat there goes back to the start
        // and, calm again, to the step before the threatened one.
        assert_eq!(p.step(&c, ms(16_000), &obs(1.3, 0.5)), eased(2, false));
        assert_eq!(p.step(&c, ms(16_100), &obs(1.0, 0.5)), eased(0, false));
        p.step(&c, ms(16_200), &fine());
        assert!(p.step(&c, ms(32_100), &fine()).is_empty());
        assert_eq!(p.step(&c, ms(32_200), &fine()), eased(1, true), "{p:?}");
    }

    /// Four easing steps, kept at the last, a failed step waiting 20 s.
    fn reprobing() -> PolicyConfig {
        PolicyConfig {
            ease_steps: 4,
            keep_ratio: 0.25,
            reprobe_after: ms(20_000),
            ..io_like()
        }
    }

    #[test]
    fn a_step_that_failed_is_tried_again_only_after_a_doubling_wait() {
        let c = reprobing();
        let fine = || obs(1.5, 0.5);
        let mut p = eased_to_step_3(&c);
        // Step 3 lets the floor slip: back to 2, kept there while step 3 waits.
        assert_eq!(p.step(&c, ms(7300), &obs(1.3, 0.5)), eased(2, false));
        let run = |p: &mut ResourcePolicy, from: u64, to: u64| {
            (from..to)
                .step_by(100)
                .flat_map(|t| {
                    p.step(&c, ms(t), &fine())
                        .into_iter()
                        .map(move |ch| (t, ch))
                })
                .collect::<Vec<_>>()
        };
        let changes = run(&mut p, 7400, 27_300);
        assert!(
            matches!(&changes[..], [(_, Change::Kept { step: 2, why })]
                if why.contains("step 3 let a floor slip")),
            "{changes:?}"
        );
        // Tried again 20 s after it failed.
        assert_eq!(p.step(&c, ms(27_300), &fine()), eased(3, true));
        // It fails again: the next try waits twice as long.
        assert_eq!(p.step(&c, ms(28_500), &obs(1.3, 0.5)), eased(2, false));
        let changes = run(&mut p, 28_600, 68_500);
        assert!(
            changes
                .iter()
                .all(|(_, ch)| matches!(ch, Change::Kept { step: 2, .. })),
            "{changes:?}"
        );
        assert_eq!(p.step(&c, ms(68_500), &fine()), eased(3, true));
    }

    #[test]
    fn a_waiting_step_does_not_hold_back_the_release_of_a_higher_level() {
        let c = reprobing();
        let fine = || obs(1.5, 0.5);
        let mut p = ResourcePolicy::new(&c);
        p.step(&c, ms(0), &obs(1.0, 0.5));
        p.step(&c, ms(100), &fine());
        assert_eq!(p.step(&c, ms(2100), &fine()), eased(1, true));
        // Step 1 slips: it waits 20 s. A threat at the first hold escalates.
        assert_eq!(p.step(&c, ms(3300), &obs(1.3, 0.5)), eased(0, false));
        p.step(&c, ms(3400), &obs(1.0, 0.5));
        let ch = p.step(&c, ms(4500), &obs(1.0, 0.5));
        assert!(
            matches!(&ch[..], [Change::Tighten { level: 2, .. }]),
            "{ch:?}"
        );
        // Level 2 is released after the hold time, long before step 1 may be tried.
        let released = (4600..23_000).step_by(100).find(|&t| {
            p.step(&c, ms(t), &fine())
                .contains(&Change::Release { level: 1 })
        });
        assert!(released.is_some_and(|t| t < 15_000), "{released:?} {p:?}");
    }

    #[test]
    fn without_a_keep_ratio_the_last_step_is_a_release() {
        let c = PolicyConfig {
            threat_ratio: 0.75,
            comfortable_ratio: 0.95,
            ease_steps: 1,
            ..PolicyConfig::default()
        };
        let mut p = ResourcePolicy::new(&c);
        p.step(&c, ms(0), &obs(1.0, 0.5));
        let mut changes = Vec::new();
        for t in (100..10_000).step_by(100) {
            changes.extend(p.step(&c, ms(t), &obs(1.5, 0.5)));
        }
        assert!(
            changes.ends_with(&[
                Change::Ease {
                    step: 1,
                    wider: true
                },
                Change::Release { level: 0 }
            ]),
            "{changes:?}"
        );
    }

    #[test]
    fn any_threatened_workload_counts_and_levels_are_capped() {
        let c = PolicyConfig::default();
        let mut p = ResourcePolicy::new(&c);
        let mut o = obs(1.5, 0.0);
        o.push(FloorObs {
            id: "managed/b".into(),
            floor: 10.0,
            usage: 1.0,
            stall: 0.9,
            why: None,
        });
        for t in 0..100 {
            p.step(&c, ms(t * 100), &o);
        }
        assert_eq!(p.level(), c.max_level);
    }
}
