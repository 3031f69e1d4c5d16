//! The sampler's view of the datapath: on every sampling tick, each workload's
//! network counters, rates, caps and throttling (for the workloads the
//! datapath counts) and its run-queue statistics (for every workload with a
//! cgroup2 directory, summed over its sub-cgroups). Reads the pinned maps
//! through its own read-only handles, so sampling never waits for the floor
//! loop. What it cannot report is named in the sample's `unavailable`.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use daros_ebpf::floor_runner::monotonic_ns;
use daros_ebpf::net::{CapStatus, DirCounters, WorkloadNet};
use daros_ebpf::{CgroupId, NetReader, SchedReader, SchedStats};
use tracing::warn;

use super::reconcile::subtree;
use super::service::{NetService, Registered, lock};
use crate::cgroup::CgroupPath;
use crate::model::Workload;
use crate::model::net::{NetDirectionSample, NetworkSample, RunQueueSample};
use crate::sensing::WorkloadSource;
use crate::sensing::rate::Counter;

/// Sub-cgroups are looked for again after this long.
const REWALK: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Ids {
    top: u64,
    all: Vec<CgroupId>,
    walked: Instant,
}

#[derive(Debug, Default)]
struct Prev {
    bytes: [Counter; 2],
    packets: [Counter; 2],
    sched: Option<(SchedStats, Instant)>,
}

/// The [`WorkloadSource`] of the datapath.
#[derive(Debug)]
pub struct NetSource {
    svc: Arc<NetService>,
    net: Option<NetReader>,
    net_generation: u64,
    sched: Option<SchedReader>,
    open_logged: bool,
    ids: HashMap<String, Ids>,
    prev: HashMap<String, Prev>,
}

const OBSERVED: &str = "observed only: the datapath counts workloads under the managed root and those an operator put under a QoS class";

impl NetSource {
    /// A source reading `svc`'s pins.
    pub fn new(svc: Arc<NetService>) -> Self {
        NetSource {
            svc,
            net: None,
            net_generation: u64::MAX,
            sched: None,
            open_logged: false,
            ids: HashMap::new(),
            prev: HashMap::new(),
        }
    }

    fn open_readers(&mut self, reg: &Registered) {
        let pins = &self.svc.settings().pins;
        let mut failed = Vec::new();
        if self.svc.network().available {
            match &mut self.net {
                None => match NetReader::open(pins) {
                    Ok(r) => {
                        self.net = Some(r);
                        self.net_generation = reg.generation;
                    }
                    Err(e) => failed.push(format!("network maps: {e}")),
                },
                Some(r) if self.net_generation != reg.generation => {
                    if let Err(e) = r.refresh() {
                        failed.push(format!("network index: {e}"));
                    } else {
                        self.net_generation = reg.generation;
                    }
                }
                Some(_) => {}
            }
        }
        if self.svc.runqueue().available && self.sched.is_none() {
            match SchedReader::open(pins) {
                Ok(r) => self.sched = Some(r),
                Err(e) => failed.push(format!("run-queue maps: {e}")),
            }
        }
        if !failed.is_empty() && !self.open_logged {
            warn!(errors = ?failed, "cannot read the pinned datapath maps");
            self.open_logged = true;
        }
    }

    fn network(&mut self, w: &mut Workload, reg: &Registered, mono: u64, now: Instant) {
        let svc = &self.svc;
        if !svc.network().available {
            w.sample
                .unavailable
                .insert("network".into(), svc.network().detail.clone());
            return;
        }
        let st = match reg.workloads.get(&w.id) {
            None if w.managed => {
                w.sample
                    .unavailable
                    .insert("network".into(), "not attached yet".into());
                return;
            }
            None => {
                w.sample
                    .unavailable
                    .insert("network".into(), OBSERVED.into());
                return;
            }
            Some(st) => st,
        };
        let (Some(id), true) = (st.cgroup_id, st.attached) else {
            let why = st
                .error
                .clone()
                .unwrap_or_else(|| "not attached yet".into());
            w.sample.unavailable.insert("network".into(), why);
            return;
        };
        let Some(reader) = &self.net else {
            w.sample.unavailable.insert(
                "network".into(),
                "the pinned network maps cannot be read".into(),
            );
            return;
        };
        let wn = match reader.workload(CgroupId(id)) {
            Ok(wn) => wn,
            Err(e) => {
                w.sample
                    .unavailable
                    .insert("network".into(), format!("reading the network maps: {e}"));
                return;
            }
        };
        let prev = self.prev.entry(w.id.clone()).or_default();
        let episodes = {
            let book = lock(&svc.shared().events);
            [
                book.episodes(&w.id, "egress"),
                book.episodes(&w.id, "ingress"),
            ]
        };
        w.sample.network = Some(network_sample(&wn, prev, episodes, mono, now));
    }

    fn ids(&mut self, w: &Workload, now: Instant) -> Result<Vec<CgroupId>, String> {
        let Some(root) = self.svc.settings().cgroup2.clone() else {
            return Err("no cgroup2 mount".into());
        };
        let path: PathBuf = CgroupPath::new(&w.cgroup)
            .map(|c| c.under(&root))
            .map_err(|e| e.to_string())?;
        let top = std::fs::metadata(&path).map(|m| m.ino()).map_err(|_| {
            format!(
                "no cgroup2 directory {}: run-queue statistics are kept per cgroup2 cgroup of each task",
                path.display()
            )
        })?;
        let fresh = self
            .ids
            .get(&w.id)
            .is_some_and(|i| i.top == top && i.walked.elapsed() < REWALK);
        if !fresh {
            let mut all = vec![CgroupId(top)];
            all.extend(subtree(&path));
            self.ids.insert(
                w.id.clone(),
                Ids {
                    top,
                    all,
                    walked: now,
                },
            );
        }
        Ok(self
            .ids
            .get(&w.id)
            .map(|i| i.all.clone())
            .unwrap_or_default())
    }

    fn runqueue(&mut self, w: &mut Workload, now: Instant) {
        if !self.svc.runqueue().available {
            w.sample
                .unavailable
                .insert("runqueue".into(), self.svc.runqueue().detail.clone());
            return;
        }
        let ids = match self.ids(w, now) {
            Ok(ids) => ids,
            Err(why) => {
                w.sample.unavailable.insert("runqueue".into(), why);
                return;
            }
        };
        let Some(reader) = &self.sched else {
            w.sample.unavailable.insert(
                "runqueue".into(),
                "the pinned run-queue maps cannot be read".into(),
            );
            return;
        };
        let mut sum = SchedStats::default();
        for id in &ids {
            match reader.get(*id) {
                Ok(Some(s)) => add(&mut sum, &s),
                Ok(None) => {}
                Err(e) => {
                    w.sample
                        .unavailable
                        .insert("runqueue".into(), format!("reading the run-queue map: {e}"));
                    return;
                }
            }
        }
        let prev = self.prev.entry(w.id.clone()).or_default();
        w.sample.runqueue = Some(runqueue_sample(&sum, ids.len(), prev, now));
    }
}

fn add(sum: &mut SchedStats, s: &SchedStats) {
    sum.oncpu_ns += s.oncpu_ns;
    sum.slices += s.slices;
    sum.wait_ns += s.wait_ns;
    sum.waits += s.waits;
    sum.wait_max_ns = sum.wait_max_ns.max(s.wait_max_ns);
    for (a, b) in sum.wait_hist.iter_mut().zip(s.wait_hist) {
        *a += b;
    }
}

fn direction(
    c: &DirCounters,
    cap: &CapStatus,
    bytes: &mut Counter,
    packets: &mut Counter,
    episodes: u64,
    mono: u64,
    now: Instant,
) -> NetDirectionSample {
    NetDirectionSample {
        bytes_total: c.bytes,
        packets_total: c.packets,
        dropped_bytes_total: c.drop_bytes,
        dropped_packets_total: c.drop_packets,
        marked_packets_total: c.marked_packets,
        bytes_per_second: bytes.update(c.bytes, now),
        packets_per_second: packets.update(c.packets, now),
        cap_bytes_per_second: cap.effective_bps,
        limit_bytes_per_second: cap.configured_bps,
        floor_cap_bytes_per_second: cap.floor_cap_bps,
        throttled: cap.throttled_since_ns.is_some(),
        throttled_seconds: cap
            .throttled_since_ns
            .map(|t| mono.saturating_sub(t) as f64 / 1e9),
        throttle_episodes_total: episodes,
    }
}

fn network_sample(
    wn: &WorkloadNet,
    prev: &mut Prev,
    episodes: [u64; 2],
    mono: u64,
    now: Instant,
) -> NetworkSample {
    let [eb, ib] = &mut prev.bytes;
    let [ep, ip] = &mut prev.packets;
    NetworkSample {
        egress: direction(
            &wn.counters.egress,
            &wn.egress,
            eb,
            ep,
            episodes[0],
            mono,
            now,
        ),
        ingress: direction(
            &wn.counters.ingress,
            &wn.ingress,
            ib,
            ip,
            episodes[1],
            mono,
            now,
        ),
        members: wn.members.len(),
    }
}

fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

fn runqueue_sample(
    s: &SchedStats,
    cgroups: usize,
    prev: &mut Prev,
    now: Instant,
) -> RunQueueSample {
    let mut out = RunQueueSample {
        oncpu_seconds_total: s.oncpu_ns as f64 / 1e9,
        slices_total: s.slices,
        wait_seconds_total: s.wait_ns as f64 / 1e9,
        waits_total: s.waits,
        wait_max_seconds: s.wait_max_ns as f64 / 1e9,
        wait_histogram: s.wait_hist.to_vec(),
        cgroups,
        ..RunQueueSample::default()
    };
    if let Some((p, at)) = &prev.sched {
        let dt = now.saturating_duration_since(*at).as_secs_f64();
        // A cgroup recreated (or pruned) restarts its counters: no rate then.
        let monotonic = s.waits >= p.waits && s.oncpu_ns >= p.oncpu_ns && s.wait_ns >= p.wait_ns;
        if dt > 0.0 && monotonic {
            let d = s.since(p);
            out.oncpu_cores = Some(d.oncpu_ns as f64 / 1e9 / dt);
            out.waits_per_second = Some(d.waits as f64 / dt);
            out.wait_seconds_per_second = Some(d.wait_ns as f64 / 1e9 / dt);
            out.wait_p50_seconds = secs(d.wait_quantile(0.5));
            out.wait_p99_seconds = secs(d.wait_quantile(0.99));
        }
    }
    prev.sched = Some((*s, now));
    out
}

impl WorkloadSource for NetSource {
    fn fill(&mut self, workloads: &mut [Workload]) {
        let now = Instant::now();
        let mono = monotonic_ns();
        let reg = self.svc.shared().registered();
        self.open_readers(&reg);
        if let Some(r) = &self.net
            && let Ok(s) = r.stats()
        {
            let mut node = lock(&self.svc.shared().node);
            node.unregistered_bytes = s.unknown_bytes;
            node.events_lost = s.events_lost;
        }
        for w in workloads.iter_mut() {
            self.network(w, &reg, mono, now);
            self.runqueue(w, now);
        }
        let live: std::collections::HashSet<&str> =
            workloads.iter().map(|w| w.id.as_str()).collect();
        self.prev.retain(|id, _| live.contains(id.as_str()));
        self.ids.retain(|id, _| live.contains(id.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runqueue_rates_and_quantiles_come_from_the_last_interval() {
        let mut prev = Prev::default();
        let t0 = Instant::now();
        let mut s = SchedStats {
            oncpu_ns: 1_000_000_000,
            waits: 100,
            wait_ns: 10_000_000,
            wait_max_ns: 3_000_000,
            ..SchedStats::default()
        };
        s.wait_hist[0] = 100;
        let first = runqueue_sample(&s, 1, &mut prev, t0);
        assert_eq!(first.oncpu_cores, None, "no rate on the first sample");
        assert_eq!(first.wait_max_seconds, 0.003);
        // one second later: 500 ms on CPU, 10 more waits of which one in [1024, 2048) us
        s.oncpu_ns += 500_000_000;
        s.waits += 10;
        s.wait_ns += 2_000_000;
        s.wait_hist[0] += 9;
        s.wait_hist[10] += 1;
        let r = runqueue_sample(&s, 2, &mut prev, t0 + Duration::from_secs(1));
        assert!((r.oncpu_cores.unwrap() - 0.5).abs() < 1e-9);
        assert!((r.waits_per_second.unwrap() - 10.0).abs() < 1e-9);
        assert!((r.wait_seconds_per_second.unwrap() - 0.002).abs() < 1e-9);
        assert_eq!(r.wait_p50_seconds, Some(2e-6));
        assert_eq!(r.wait_p99_seconds, Some(2048e-6));
        assert_eq!(r.waits_total, 110);
        assert_eq!(r.cgroups, 2);
        // counters went back (cgroup recreated): totals reported, no rates
        let reset = SchedStats::default();
        let r = runqueue_sample(&reset, 1, &mut prev, t0 + Duration::from_secs(2));
        assert_eq!(r.waits_per_second, None);
        assert_eq!(r.wait_p99_seconds, None);
    }

    #[test]
    fn sums_over_sub_cgroups_keep_the_largest_max() {
        let mut sum = SchedStats::default();
        let mut a = SchedStats {
            waits: 2,
            wait_max_ns: 5,
            ..SchedStats::default()
        };
        a.wait_hist[3] = 2;
        let b = SchedStats {
            waits: 1,
            wait_max_ns: 9,
            oncpu_ns: 4,
            ..SchedStats::default()
        };
        add(&mut sum, &a);
        add(&mut sum, &b);
        assert_eq!((sum.waits, sum.wait_max_ns, sum.oncpu_ns), (3, 9, 4));
        assert_eq!(sum.wait_hist[3], 2);
    }
}
