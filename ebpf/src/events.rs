//! Throttle and drop events from the network programs' ring buffer, turned into `tracing` logs,
//! counters the agent exports as metrics, and (optionally) a channel of [`NetEvent`]s.
//!
//! The programs rate-limit at the source: one event when a direction starts being throttled,
//! one when it stops, and at most one drop report per workload and direction every 100 ms
//! carrying the number of drops since the previous report.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use serde::Serialize;
use tokio::io::{Interest, unix::AsyncFd};

use crate::{
    abi::{EV_DROPS, EV_THROTTLE_START, EV_THROTTLE_STOP, EventRaw},
    cgroup::CgroupId,
    error::{Error, Result},
    net::Direction,
};

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NetEventKind {
    /// The first packet over the bucket: pass with notification or drop from now on.
    ThrottleStart,
    /// The bucket recovered; `duration` is how long the episode lasted.
    ThrottleStop {
        /// Length of the throttle episode.
        duration: Duration,
    },
    /// Packets dropped since the previous report.
    Drops {
        /// How many.
        count: u64,
    },
}

/// One event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NetEvent {
    /// CLOCK_MONOTONIC of the packet that caused it, in ns.
    pub ts_ns: u64,
    /// The workload.
    pub cgroup: CgroupId,
    /// The direction.
    pub direction: Direction,
    /// What happened.
    pub kind: NetEventKind,
}

impl NetEvent {
    /// Decodes a ring buffer record.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let raw = EventRaw::from_bytes(bytes)?;
        let kind = match raw.kind {
            EV_THROTTLE_START => NetEventKind::ThrottleStart,
            EV_THROTTLE_STOP => NetEventKind::ThrottleStop {
                duration: Duration::from_nanos(raw.value),
            },
            EV_DROPS => NetEventKind::Drops { count: raw.value },
            _ => return None,
        };
        Some(Self {
            ts_ns: raw.ts_ns,
            cgroup: CgroupId(raw.cgroup_id),
            direction: Direction::from_index(raw.dir)?,
            kind,
        })
    }
}

/// Counters of the events seen, for metrics.
#[derive(Debug, Default)]
pub struct EventStats {
    throttle_starts: AtomicU64,
    throttle_stops: AtomicU64,
    drop_reports: AtomicU64,
    drops_reported: AtomicU64,
    malformed: AtomicU64,
}

/// A copy of [`EventStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EventStatsSnapshot {
    /// Throttle episodes started.
    pub throttle_starts: u64,
    /// Throttle episodes ended.
    pub throttle_stops: u64,
    /// Drop reports received.
    pub drop_reports: u64,
    /// Sum of the drops they carried.
    pub drops_reported: u64,
    /// Records that could not be decoded.
    pub malformed: u64,
}

impl EventStats {
    /// Current values.
    pub fn snapshot(&self) -> EventStatsSnapshot {
        EventStatsSnapshot {
            throttle_starts: self.throttle_starts.load(Ordering::Relaxed),
            throttle_stops: self.throttle_stops.load(Ordering::Relaxed),
            drop_reports: self.drop_reports.load(Ordering::Relaxed),
            drops_reported: self.drops_reported.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
        }
    }

    fn record(&self, ev: &NetEvent) {
        match ev.kind {
            NetEventKind::ThrottleStart => {
                self.throttle_starts.fetch_add(1, Ordering::Relaxed);
                tracing::info!(cgroup = %ev.cgroup, direction = ev.direction.as_str(), "network throttling started");
            }
            NetEventKind::ThrottleStop { duration } => {
                self.throttle_stops.fetch_add(1, Ordering::Relaxed);
                tracing::info!(cgroup = %ev.cgroup, direction = ev.direction.as_str(), duration_ms = duration.as_millis() as u64, "network throttling stopped");
            }
            NetEventKind::Drops { count } => {
                self.drop_reports.fetch_add(1, Ordering::Relaxed);
                self.drops_reported.fetch_add(count, Ordering::Relaxed);
                tracing::warn!(cgroup = %ev.cgroup, direction = ev.direction.as_str(), dropped = count, "packets dropped by network cap");
            }
        }
    }
}

/// The consumer of the event ring buffer.
pub struct NetEvents {
    ring: RingBuf<MapData>,
    stats: Arc<EventStats>,
    lost_at_open: u64,
}

impl std::fmt::Debug for NetEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetEvents")
            .field("stats", &self.stats.snapshot())
            .finish()
    }
}

impl NetEvents {
    pub(crate) fn new(ring: RingBuf<MapData>, lost_at_open: u64) -> Self {
        Self {
            ring,
            stats: Arc::default(),
            lost_at_open,
        }
    }

    /// Shared counters, updated by [`NetEvents::drain`] and [`NetEvents::run`].
    pub fn stats(&self) -> Arc<EventStats> {
        Arc::clone(&self.stats)
    }

    /// Events the programs could not queue before this reader opened (ring buffer full,
    /// e.g. while the agent was down).
    pub fn lost_before_open(&self) -> u64 {
        self.lost_at_open
    }

    /// Takes every queued event without waiting; logs and counts each.
    pub fn drain(&mut self) -> Vec<NetEvent> {
        let mut out = Vec::new();
        while let Some(item) = self.ring.next() {
            match NetEvent::decode(&item) {
                Some(ev) => {
                    self.stats.record(&ev);
                    out.push(ev);
                }
                None => {
                    self.stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        out
    }

    /// Waits for events and handles them until the task is dropped. Each event is logged,
    /// counted, and sent to `sink` if given (a closed sink is ignored).
    #[allow(unsafe_code)]
    pub async fn run(
        self,
        sink: Option<tokio::sync::mpsc::UnboundedSender<NetEvent>>,
    ) -> Result<()> {
        // SAFETY: the ring buffer's map fd is owned by `self` (aya's MapData), stays open until
        // the AsyncFd is dropped, and as_raw_fd() always returns that same fd.
        let registered = unsafe { AsyncFd::register_with_interest(self, Interest::READABLE) };
        let mut fd = registered
            .map_err(|e| Error::io("polling", "ring buffer cg_events", e.into_parts().1))?;
        loop {
            let mut guard = fd
                .readable_mut()
                .await
                .map_err(|e| Error::io("polling", "ring buffer cg_events", e))?;
            let events = guard.get_inner_mut().drain();
            guard.clear_ready();
            if let Some(sink) = &sink {
                for ev in events {
                    let _ = sink.send(ev);
                }
            }
        }
    }
}

impl std::os::fd::AsRawFd for NetEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, dir: u32, value: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&5u64.to_ne_bytes());
        b.extend_from_slice(&77u64.to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&dir.to_ne_bytes());
        b.extend_from_slice(&value.to_ne_bytes());
        b
    }

    #[test]
    fn decodes_each_kind_and_rejects_garbage() {
        let ev = NetEvent::decode(&record(EV_DROPS, 1, 12)).unwrap();
        assert_eq!(ev.kind, NetEventKind::Drops { count: 12 });
        assert_eq!(ev.direction, Direction::Ingress);
        assert_eq!(ev.cgroup, CgroupId(77));
        let ev = NetEvent::decode(&record(EV_THROTTLE_STOP, 0, 2_000_000)).unwrap();
        assert_eq!(
            ev.kind,
            NetEventKind::ThrottleStop {
                duration: Duration::from_millis(2)
            }
        );
        assert_eq!(
            NetEvent::decode(&record(EV_THROTTLE_START, 0, 0))
                .unwrap()
                .kind,
            NetEventKind::ThrottleStart
        );
        assert!(NetEvent::decode(&record(99, 0, 0)).is_none());
        assert!(NetEvent::decode(&record(EV_DROPS, 7, 0)).is_none());
        assert!(NetEvent::decode(&[0; 8]).is_none());
    }

    #[test]
    fn stats_count_what_was_recorded() {
        let stats = EventStats::default();
        for ev in [
            NetEvent {
                ts_ns: 1,
                cgroup: CgroupId(1),
                direction: Direction::Egress,
                kind: NetEventKind::ThrottleStart,
            },
            NetEvent {
                ts_ns: 2,
                cgroup: CgroupId(1),
                direction: Direction::Egress,
                kind: NetEventKind::Drops { count: 3 },
            },
            NetEvent {
                ts_ns: 3,
                cgroup: CgroupId(1),
                direction: Direction::Egress,
                kind: NetEventKind::Drops { count: 4 },
            },
        ] {
            stats.record(&ev);
        }
        let s = stats.snapshot();
        assert_eq!(
            (
                s.throttle_starts,
                s.drop_reports,
                s.drops_reported,
                s.throttle_stops
            ),
            (1, 2, 7, 0)
        );
    }
}
