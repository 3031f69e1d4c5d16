//! SLA attainment on `/metrics` (issue 16, seed 000 §11.3): per application
//! declaring `sla.availability`, the share of time it was Running since it
//! first ran against its target, and per tenant the share of those
//! applications meeting their target.

use std::collections::BTreeMap;
use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::Gauge;

use crate::metrics::{Labels, family};

/// Encodes the availability of (tenant, application) → (attained, target).
pub fn encode(
    enc: &mut DescriptorEncoder,
    availability: &BTreeMap<(String, String), (Option<f64>, f64)>,
) -> fmt::Result {
    let labels = |t: &str, a: &str| -> Labels {
        vec![("tenant", t.to_string()), ("application", a.to_string())]
    };
    let mut attained = Vec::new();
    let mut targets = Vec::new();
    let mut met: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for ((t, a), (got, want)) in availability {
        targets.push((labels(t, a), *want));
        if let Some(got) = got {
            attained.push((labels(t, a), *got));
            let m = met.entry(t).or_default();
            m.1 += 1;
            if got >= want {
                m.0 += 1;
            }
        }
    }
    family(
        enc,
        "daros_app_availability_ratio",
        "Share of time an application declaring sla.availability was Running since it first ran (time stopped by a user or refused not counted).",
        Gauge,
        attained,
    )?;
    family(
        enc,
        "daros_app_availability_target",
        "The sla.availability an application declares.",
        Gauge,
        targets,
    )?;
    family(
        enc,
        "daros_sla_attainment_ratio",
        "Share of a tenant's applications declaring an availability SLA (and run) that meet it.",
        Gauge,
        met.into_iter()
            .map(|(t, (ok, all))| (vec![("tenant", t.to_string())], ok as f64 / all as f64))
            .collect(),
    )
}
