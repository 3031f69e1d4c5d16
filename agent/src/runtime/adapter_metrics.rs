//! Runtime-adapter health on `/metrics` (issue 16): each adapter probed
//! every few seconds (a `list` of what it runs: for Kubernetes a call to the
//! API server), `daros_adapter_up` from the last probe, and every operation
//! the executor asked counted by outcome.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use daros_adapters::stats::AdapterStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::{Counter, Gauge};

use super::Executor;
use crate::metrics::family;

/// Encodes the adapters' health and operation counters.
#[derive(Debug)]
pub struct AdapterCollector(pub Arc<AdapterStats>);

impl Collector for AdapterCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        family(
            &mut enc,
            "daros_adapter_up",
            "1 when the runtime adapter answered its last probe (a list of what it runs; for kubernetes a call to the API server).",
            Gauge,
            self.0
                .health()
                .into_iter()
                .map(|h| {
                    (
                        vec![("adapter", h.adapter.to_string())],
                        if h.last_probe.is_ok() { 1.0 } else { 0.0 },
                    )
                })
                .collect(),
        )?;
        family(
            &mut enc,
            "daros_adapter_operations",
            "Operations the executor asked of a runtime adapter, by outcome (ok, or the error: launch, kube, not-found ...).",
            Counter,
            self.0
                .operations()
                .into_iter()
                .map(|((a, op, outcome), n)| {
                    (
                        vec![
                            ("adapter", a.to_string()),
                            ("operation", op.to_string()),
                            ("outcome", outcome.to_string()),
                        ],
                        n as f64,
                    )
                })
                .collect(),
        )
    }
}

/// Probes the executor's adapters every `every` while it lives, logging a
/// change of health.
pub async fn probe_loop(executor: Weak<Executor>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    let mut last: Vec<(String, bool)> = Vec::new();
    loop {
        tick.tick().await;
        let Some(e) = executor.upgrade() else {
            return;
        };
        e.adapters().probe().await;
        let now: Vec<(String, bool)> = e
            .adapters()
            .stats()
            .health()
            .into_iter()
            .map(|h| {
                if let Err(why) = &h.last_probe
                    && !last.contains(&(h.adapter.to_string(), false))
                {
                    tracing::warn!(adapter = %h.adapter, error = %why, "runtime adapter does not answer");
                }
                (h.adapter.to_string(), h.last_probe.is_ok())
            })
            .collect();
        for (a, ok) in &now {
            if *ok && last.contains(&(a.clone(), false)) {
                tracing::info!(adapter = %a, "runtime adapter answers again");
            }
        }
        last = now;
    }
}
