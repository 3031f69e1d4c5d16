//! Throttle and drop events from the datapath's ring buffer: `daros-ebpf` logs
//! each one (with the cgroup id); here they are attributed to workloads,
//! counted per workload and direction for metrics and samples, and the latest
//! ones kept for `/v1/net`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use daros_ebpf::{NetEvent, NetEventKind};
use tracing::debug;

use super::service::{Shared, lock};
use crate::model::net::{NetEventCounts, NetEventView};

/// Events kept for `/v1/net`.
pub const RECENT: usize = 256;

/// Event counters per workload and direction, and the latest events.
#[derive(Debug, Default)]
pub struct EventBook {
    /// All events.
    pub counts: NetEventCounts,
    /// Per (workload id, direction).
    pub per_workload: BTreeMap<(String, &'static str), NetEventCounts>,
    recent: VecDeque<NetEventView>,
}

impl EventBook {
    /// Counts `ev` of `workload` (None: a cgroup that is no workload, e.g. removed
    /// since the packet) and keeps it among the recent ones.
    pub fn record(&mut self, ev: &NetEvent, workload: Option<String>, unix_ms: u64) {
        let dir = ev.direction.as_str();
        let mut view = NetEventView {
            monotonic_ns: ev.ts_ns,
            received_unix_ms: unix_ms,
            workload: workload.clone(),
            cgroup_id: ev.cgroup.0,
            direction: dir.to_string(),
            kind: String::new(),
            duration_ms: None,
            count: None,
        };
        let bump = |c: &mut NetEventCounts| match ev.kind {
            NetEventKind::ThrottleStart => c.throttle_starts += 1,
            NetEventKind::ThrottleStop { .. } => c.throttle_stops += 1,
            NetEventKind::Drops { count } => {
                c.drop_reports += 1;
                c.drops += count;
            }
        };
        bump(&mut self.counts);
        if let Some(w) = workload {
            bump(self.per_workload.entry((w, dir)).or_default());
        }
        match ev.kind {
            NetEventKind::ThrottleStart => view.kind = "throttle_start".into(),
            NetEventKind::ThrottleStop { duration } => {
                view.kind = "throttle_stop".into();
                view.duration_ms = Some(duration.as_secs_f64() * 1000.0);
            }
            NetEventKind::Drops { count } => {
                view.kind = "drops".into();
                view.count = Some(count);
            }
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(view);
    }

    /// Throttle episodes of one workload and direction.
    pub fn episodes(&self, workload: &str, dir: &'static str) -> u64 {
        self.per_workload
            .get(&(workload.to_string(), dir))
            .map_or(0, |c| c.throttle_starts)
    }

    /// Forgets the counters of workloads that are gone.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.per_workload.retain(|(w, _), _| keep(w));
    }

    /// The recent events, oldest first.
    pub fn recent(&self) -> Vec<NetEventView> {
        self.recent.iter().cloned().collect()
    }
}

/// Reads events from `rx` (fed by `NetEvents::run`) until it closes.
pub async fn consume(mut rx: tokio::sync::mpsc::UnboundedReceiver<NetEvent>, shared: Arc<Shared>) {
    while let Some(ev) = rx.recv().await {
        let workload = shared.registered().by_cgroup.get(&ev.cgroup.0).cloned();
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        debug!(workload = ?workload, cgroup = %ev.cgroup, direction = ev.direction.as_str(), kind = ?ev.kind, "datapath event");
        lock(&shared.events).record(&ev, workload, unix_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_ebpf::{CgroupId, Direction};
    use std::time::Duration;

    fn ev(kind: NetEventKind, dir: Direction) -> NetEvent {
        NetEvent {
            ts_ns: 7,
            cgroup: CgroupId(42),
            direction: dir,
            kind,
        }
    }

    #[test]
    fn counts_per_workload_and_keeps_the_latest() {
        let mut b = EventBook::default();
        b.record(
            &ev(NetEventKind::ThrottleStart, Direction::Egress),
            Some("managed/be".into()),
            1,
        );
        b.record(
            &ev(NetEventKind::Drops { count: 5 }, Direction::Egress),
            Some("managed/be".into()),
            2,
        );
        b.record(
            &ev(
                NetEventKind::ThrottleStop {
                    duration: Duration::from_millis(30),
                },
                Direction::Ingress,
            ),
            None,
            3,
        );
        assert_eq!(
            b.counts,
            NetEventCounts {
                throttle_starts: 1,
                throttle_stops: 1,
                drop_reports: 1,
                drops: 5
            }
        );
        assert_eq!(b.episodes("managed/be", "egress"), 1);
        assert_eq!(b.episodes("managed/be", "ingress"), 0);
        let r = b.recent();
        assert_eq!(r.len(), 3);
        assert_eq!(r[1].kind, "drops");
        assert_eq!(r[1].count, Some(5));
        assert_eq!(r[2].workload, None);
        assert_eq!(r[2].duration_ms, Some(30.0));
        for i in 0..RECENT {
            b.record(
                &ev(NetEventKind::ThrottleStart, Direction::Egress),
                None,
                i as u64,
            );
        }
        assert_eq!(b.recent().len(), RECENT);
        b.retain(|_| false);
        assert_eq!(b.episodes("managed/be", "egress"), 0);
    }
}
