//! Application-level arbitration within a tenant (seed 000 §7.3.2): higher
//! priority first, then the more latency-sensitive SLA, then first admitted.

use crate::model::application::SlaGoals;
use std::cmp::Reverse;

/// Sort key of an application within its tenant: lower sorts first.
pub fn order_key(priority: u32, sla: &SlaGoals, admitted_seq: u64) -> (Reverse<u32>, u8, u64) {
    (Reverse(priority), sla.urgency_rank(), admitted_seq)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::application::LatencyClass;

    #[test]
    fn priority_then_sla_then_age() {
        let crit = SlaGoals {
            latency: Some(LatencyClass::Critical),
            ..Default::default()
        };
        let batch = SlaGoals {
            latency: Some(LatencyClass::Batch),
            ..Default::default()
        };
        let mut v = [
            ("low-old", order_key(10, &crit, 1)),
            ("high-batch", order_key(50, &batch, 3)),
            ("high-crit", order_key(50, &crit, 4)),
            ("high-crit-older", order_key(50, &crit, 2)),
        ];
        v.sort_by_key(|(_, k)| *k);
        let names: Vec<_> = v.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            ["high-crit-older", "high-crit", "high-batch", "low-old"]
        );
    }
}
