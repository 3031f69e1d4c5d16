//! Node pressure for the coordinator: this node's PSI against the
//! operator's thresholds (`[mesh] pressure_*`, percent of the last 10 s
//! stalled). Crossing a threshold reports the node under pressure (its
//! applications there are Degraded); it ends once every resource is below
//! half its threshold, so that a node hovering at the line does not flap.

use std::sync::Arc;
use std::time::Duration;

use daros_coordinator::Command;
use tracing::{debug, info};

use super::plane::ControlPlane;
use crate::model::{PressureSample, PsiSample};

/// Reads this node's latest PSI.
pub type PsiFn = Arc<dyn Fn() -> Option<PsiSample> + Send + Sync>;

/// How often the node's PSI is compared with the thresholds.
const EVERY: Duration = Duration::from_secs(5);

/// Thresholds in percent of time stalled (avg10); 0 turns one off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Memory, all tasks stalled (`full`).
    pub memory_full: f64,
    /// IO, all tasks stalled (`full`).
    pub io_full: f64,
    /// CPU, some tasks waiting (`some`).
    pub cpu_some: f64,
}

/// What is under pressure now: `Some(detail)` when a resource is at or above
/// its threshold, or — while `under` — still above half of it.
pub fn verdict(t: &Thresholds, psi: &PsiSample, under: bool) -> Option<String> {
    let full = |p: &Option<PressureSample>| p.and_then(|p| p.full).map(|l| l.avg10);
    let some = |p: &Option<PressureSample>| p.map(|p| p.some.avg10);
    let lines = [
        ("memory full", full(&psi.memory), t.memory_full),
        ("io full", full(&psi.io), t.io_full),
        ("cpu some", some(&psi.cpu), t.cpu_some),
    ];
    let over: Vec<String> = lines
        .iter()
        .filter(|(_, _, limit)| *limit > 0.0)
        .filter_map(|(what, v, limit)| {
            let v = (*v)?;
            let bar = if under { limit / 2.0 } else { *limit };
            (v >= bar).then(|| format!("{what} {v:.1}% (avg10) >= {bar:.1}%"))
        })
        .collect();
    (!over.is_empty()).then(|| over.join(", "))
}

/// Reports this node's pressure to the coordinator whenever it starts or
/// ends (and again after a write that did not go through).
pub async fn report_loop(plane: Arc<ControlPlane>, t: Thresholds, psi: PsiFn) {
    if t.memory_full <= 0.0 && t.io_full <= 0.0 && t.cpu_some <= 0.0 {
        return;
    }
    let mut every = tokio::time::interval(EVERY);
    // What the coordinator was last told: it starts with "no pressure".
    let mut told: Option<String> = None;
    loop {
        every.tick().await;
        let Some(sample) = psi() else {
            continue;
        };
        let now = verdict(&t, &sample, told.is_some());
        if now.is_some() == told.is_some() {
            continue;
        }
        let cmd = Command::NodePressure {
            node: plane.node_name().to_string(),
            pressure: now.clone(),
        };
        match plane.write(cmd).await {
            Ok(_) => {
                match &now {
                    Some(d) => info!(pressure = %d, "node under pressure: reported"),
                    None => info!("node pressure ended: reported"),
                }
                told = now;
            }
            Err(e) => debug!(error = %e, "node pressure not written yet"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PressureLine;

    fn line(avg10: f64) -> PressureLine {
        PressureLine {
            avg10,
            avg60: 0.0,
            avg300: 0.0,
            stalled_seconds_total: 0.0,
        }
    }

    fn psi(mem_full: f64, cpu_some: f64) -> PsiSample {
        PsiSample {
            cpu: Some(PressureSample {
                some: line(cpu_some),
                full: None,
            }),
            memory: Some(PressureSample {
                some: line(mem_full),
                full: Some(line(mem_full)),
            }),
            io: None,
        }
    }

    #[test]
    fn thresholds_with_hysteresis() {
        let t = Thresholds {
            memory_full: 10.0,
            io_full: 0.0,
            cpu_some: 0.0,
        };
        assert_eq!(verdict(&t, &psi(9.9, 99.0), false), None, "cpu is off");
        assert_eq!(
            verdict(&t, &psi(12.0, 0.0), false).as_deref(),
            Some("memory full 12.0% (avg10) >= 10.0%")
        );
        // Under pressure: it lasts until below half the threshold.
        assert!(verdict(&t, &psi(6.0, 0.0), true).is_some());
        assert_eq!(verdict(&t, &psi(4.9, 0.0), true), None);
        // No PSI for a resource: never under pressure for it.
        let t = Thresholds { io_full: 5.0, ..t };
        assert_eq!(verdict(&t, &psi(0.0, 0.0), false), None);
    }
}
