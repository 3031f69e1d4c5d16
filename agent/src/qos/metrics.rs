//! Prometheus metrics of QoS enforcement, encoded at scrape time: per workload
//! and knob the status and applied value, floors, the admission account, the
//! protection loop's holds, counters and reaction-time histogram.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use crate::metrics::family;

use super::protect::REACTION_BUCKETS;
use super::service::QosService;

/// Encodes the QoS state of a [`QosService`].
#[derive(Debug)]
pub struct QosCollector {
    svc: Arc<QosService>,
}

impl QosCollector {
    /// A collector over `svc`.
    pub fn new(svc: Arc<QosService>) -> Self {
        QosCollector { svc }
    }
}

impl Collector for QosCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use MetricType::{Counter, Gauge};
        let o = self.svc.overview();
        let mut class = Vec::new();
        let mut status = Vec::new();
        let mut applied = Vec::new();
        let mut floors = Vec::new();
        for w in &o.workloads {
            class.push((
                vec![
                    ("workload", w.workload.clone()),
                    ("class", w.class.to_string()),
                ],
                1.0,
            ));
            for k in &w.knobs {
                let l = vec![("workload", w.workload.clone()), ("knob", k.knob.clone())];
                let mut s = l.clone();
                s.push(("status", k.status.as_str().to_string()));
                status.push((s, 1.0));
                if let Some(v) = k.applied_number() {
                    applied.push((l, v));
                }
            }
            let r = &w.reservation;
            for (res, v) in [
                ("cpu", r.cpu.map(|c| c.millis() as f64 / 1000.0)),
                ("memory", r.memory.map(|m| m.get() as f64)),
                ("io_read", r.io_read.map(|v| v.get() as f64)),
                ("io_write", r.io_write.map(|v| v.get() as f64)),
                ("network_egress", r.network_egress.map(|v| v.get() as f64)),
                ("network_ingress", r.network_ingress.map(|v| v.get() as f64)),
            ] {
                if let Some(v) = v {
                    floors.push((
                        vec![
                            ("workload", w.workload.clone()),
                            ("resource", res.to_string()),
                        ],
                        v,
                    ));
                }
            }
        }
        family(
            &mut enc,
            "daros_qos_workload_class",
            "QoS class of a workload (1)",
            Gauge,
            class,
        )?;
        family(
            &mut enc,
            "daros_qos_knob_status",
            "Knob status per workload: 1 for the current status (enforced or degraded)",
            Gauge,
            status,
        )?;
        family(
            &mut enc,
            "daros_qos_knob_applied",
            "Value in effect as read back (bytes, weight, cores for cpu.max; +Inf for max)",
            Gauge,
            applied,
        )?;
        family(
            &mut enc,
            "daros_qos_floor",
            "MinimalReservation floor (cores, bytes, bytes/s)",
            Gauge,
            floors,
        )?;
        let mut reserved = Vec::new();
        let mut allocatable = Vec::new();
        for a in &o.admission {
            reserved.push((
                vec![("resource", a.resource.clone())],
                a.reserved_value as f64,
            ));
            if let Some(v) = a.allocatable_value {
                allocatable.push((vec![("resource", a.resource.clone())], v as f64));
            }
        }
        family(
            &mut enc,
            "daros_qos_reserved",
            "Sum of admitted floors (millicores, bytes, bytes/s)",
            Gauge,
            reserved,
        )?;
        family(
            &mut enc,
            "daros_qos_allocatable",
            "Capacity minus system reserve (millicores, bytes, bytes/s)",
            Gauge,
            allocatable,
        )?;

        let p = &o.protection;
        family(
            &mut enc,
            "daros_qos_protection_running",
            "1 when the protection loop runs",
            Gauge,
            vec![(vec![], if p.running { 1.0 } else { 0.0 })],
        )?;
        family(
            &mut enc,
            "daros_qos_protection_level",
            "Hold level per resource (0: nothing held)",
            Gauge,
            p.levels
                .iter()
                .map(|(r, l)| (vec![("resource", r.clone())], f64::from(*l)))
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_qos_protection_held",
            "Knobs held back right now (1)",
            Gauge,
            p.holds
                .iter()
                .map(|h| {
                    (
                        vec![
                            ("workload", h.workload.clone()),
                            ("resource", h.resource.as_str().to_string()),
                            ("knob", h.knob.clone()),
                        ],
                        1.0,
                    )
                })
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_qos_protection_tick_seconds",
            "Average wall time of one protection sampler tick",
            Gauge,
            vec![(vec![], p.tick_cost_us / 1e6)],
        )?;
        let shared = self.svc.shared();
        let c = shared.counters();
        family(
            &mut enc,
            "daros_qos_protection_holds",
            "Holds started or tightened, per resource and held class",
            Counter,
            c.holds
                .iter()
                .map(|((r, cl), n)| {
                    (
                        vec![("resource", r.clone()), ("class", cl.clone())],
                        *n as f64,
                    )
                })
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_qos_protection_releases",
            "Release steps per resource",
            Counter,
            c.releases
                .iter()
                .map(|(r, n)| (vec![("resource", r.clone())], *n as f64))
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_qos_protection_restored",
            "Threatened floors restored per resource",
            Counter,
            c.restored
                .iter()
                .map(|(r, n)| (vec![("resource", r.clone())], *n as f64))
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_qos_protection_ticks",
            "Sampler ticks of the protection loop",
            Counter,
            vec![(
                vec![],
                shared.ticks.load(std::sync::atomic::Ordering::Relaxed) as f64,
            )],
        )?;
        family(
            &mut enc,
            "daros_qos_protection_psi_wakeups",
            "Protection loop wake-ups by a PSI trigger",
            Counter,
            vec![(
                vec![],
                shared
                    .psi_wakeups
                    .load(std::sync::atomic::Ordering::Relaxed) as f64,
            )],
        )?;
        let mut buckets: Vec<(f64, u64)> = REACTION_BUCKETS
            .iter()
            .copied()
            .zip(c.reaction_buckets.iter().copied())
            .collect();
        buckets.push((f64::INFINITY, c.reaction_buckets[REACTION_BUCKETS.len()]));
        let mut m = enc.encode_descriptor(
            "daros_qos_protection_reaction_seconds",
            "From the first tick that saw a floor threatened to the tick that saw it back at 95%",
            None,
            MetricType::Histogram,
        )?;
        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            c.reaction_sum,
            c.reaction_count,
            &buckets,
            None,
        )?;
        Ok(())
    }
}
