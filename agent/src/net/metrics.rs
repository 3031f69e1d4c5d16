//! Prometheus metrics of the datapath itself, encoded at scrape time: which
//! parts run, events by kind and per workload, the floor loop's work and latest
//! decision. Per-workload traffic and run-queue figures come with the snapshot
//! (`crate::metrics`).

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use crate::metrics::{Labels, family};

use super::service::{NetService, lock};

/// Encodes the state of a [`NetService`].
#[derive(Debug)]
pub struct NetCollector {
    svc: Arc<NetService>,
}

impl NetCollector {
    /// A collector over `svc`.
    pub fn new(svc: Arc<NetService>) -> Self {
        NetCollector { svc }
    }
}

fn one(v: f64) -> Vec<(Labels, f64)> {
    vec![(Vec::new(), v)]
}

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl Collector for NetCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use MetricType::{Counter, Gauge};
        let s = self.svc.status();
        let caps = self.svc.caps();
        family(
            &mut enc,
            "daros_net_datapath_available",
            "1 when a part of the eBPF datapath works (network, runqueue, floors)",
            Gauge,
            vec![
                (
                    vec![("part", "network".into())],
                    flag(caps.network.available),
                ),
                (
                    vec![("part", "runqueue".into())],
                    flag(caps.runqueue.available),
                ),
                (vec![("part", "floors".into())], flag(caps.floors.available)),
            ],
        )?;
        family(
            &mut enc,
            "daros_net_attached_workloads",
            "Workloads the datapath counts (attached and registered)",
            Gauge,
            one(s.workloads.iter().filter(|w| w.attached).count() as f64),
        )?;
        family(
            &mut enc,
            "daros_net_events",
            "Ring-buffer events by kind (throttle start/stop, drop reports)",
            Counter,
            vec![
                (
                    vec![("kind", "throttle_start".into())],
                    s.events.throttle_starts as f64,
                ),
                (
                    vec![("kind", "throttle_stop".into())],
                    s.events.throttle_stops as f64,
                ),
                (
                    vec![("kind", "drop_report".into())],
                    s.events.drop_reports as f64,
                ),
            ],
        )?;
        family(
            &mut enc,
            "daros_net_reported_drops",
            "Packets dropped by caps, as the drop reports counted them",
            Counter,
            one(s.events.drops as f64),
        )?;
        let per: Vec<_> = {
            let book = lock(&self.svc.shared().events);
            book.per_workload
                .iter()
                .map(|((w, d), c)| (w.clone(), *d, *c))
                .collect()
        };
        let mut items = Vec::new();
        for (w, d, c) in per {
            for (kind, v) in [
                ("throttle_start", c.throttle_starts),
                ("throttle_stop", c.throttle_stops),
                ("drop_report", c.drop_reports),
            ] {
                items.push((
                    vec![
                        ("workload", w.clone()),
                        ("direction", d.to_string()),
                        ("kind", kind.to_string()),
                    ],
                    v as f64,
                ));
            }
        }
        family(
            &mut enc,
            "daros_net_workload_events",
            "Ring-buffer events per workload, direction and kind",
            Counter,
            items,
        )?;
        family(
            &mut enc,
            "daros_net_unregistered_bytes",
            "Bytes of sockets in cgroups below an attach point that are no workload",
            Counter,
            one(s.unregistered_bytes_total as f64),
        )?;
        family(
            &mut enc,
            "daros_net_events_lost",
            "Events the programs could not queue",
            Counter,
            one(s.events_lost_total as f64),
        )?;
        let f = &s.floors;
        if f.running || f.ticks_total > 0 {
            family(
                &mut enc,
                "daros_net_floor_ticks",
                "Floor loop ticks",
                Counter,
                one(f.ticks_total as f64),
            )?;
            family(
                &mut enc,
                "daros_net_floor_cap_writes",
                "Floor caps set or lifted",
                Counter,
                one(f.cap_writes_total as f64),
            )?;
            family(
                &mut enc,
                "daros_net_floor_errors",
                "Floor loop ticks that failed",
                Counter,
                one(f.errors_total as f64),
            )?;
            let dirs = |g: fn(&crate::model::net::FloorDirection) -> f64| {
                vec![
                    (vec![("direction", "egress".to_string())], g(&f.egress)),
                    (vec![("direction", "ingress".to_string())], g(&f.ingress)),
                ]
            };
            family(
                &mut enc,
                "daros_net_floor_capping",
                "1 while the floor loop caps BestEffort/Burstable traffic",
                Gauge,
                dirs(|d| flag(d.capping)),
            )?;
            family(
                &mut enc,
                "daros_net_floor_reserved_bytes_per_second",
                "Bandwidth held for active floors and uncapped classes",
                Gauge,
                dirs(|d| d.reserved_bytes_per_second as f64),
            )?;
            family(
                &mut enc,
                "daros_net_floor_shortfall_reserve_bytes_per_second",
                "Bandwidth also held back because floors fell short on a full link",
                Gauge,
                dirs(|d| d.shortfall_reserve_bytes_per_second as f64),
            )?;
            family(
                &mut enc,
                "daros_net_floor_budget_bytes_per_second",
                "Bandwidth left for Burstable and BestEffort",
                Gauge,
                dirs(|d| d.budget_bytes_per_second as f64),
            )?;
            family(
                &mut enc,
                "daros_net_floor_demand_bytes_per_second",
                "Measured demand of Burstable and BestEffort",
                Gauge,
                dirs(|d| d.demand_bytes_per_second as f64),
            )?;
        }
        let mut caps = Vec::new();
        for w in &s.workloads {
            for (dir, v) in [
                ("egress", w.egress_floor_cap_bytes_per_second),
                ("ingress", w.ingress_floor_cap_bytes_per_second),
            ] {
                if let Some(v) = v {
                    caps.push((
                        vec![("workload", w.workload.clone()), ("direction", dir.into())],
                        v as f64,
                    ));
                }
            }
        }
        family(
            &mut enc,
            "daros_net_workload_floor_cap_bytes_per_second",
            "Cap the floor loop holds a workload to",
            Gauge,
            caps,
        )?;
        Ok(())
    }
}
