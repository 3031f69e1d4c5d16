//! Pressure stall information as served by the API.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cgroup::parse::{Psi, PsiLine};

/// One PSI line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PressureLine {
    /// Percent of the last 10 s stalled.
    pub avg10: f64,
    /// Percent of the last 60 s stalled.
    pub avg60: f64,
    /// Percent of the last 300 s stalled.
    pub avg300: f64,
    /// Total stall time in seconds.
    pub stalled_seconds_total: f64,
}

/// Pressure of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PressureSample {
    /// Some tasks stalled.
    pub some: PressureLine,
    /// All non-idle tasks stalled (absent where the kernel does not report it).
    pub full: Option<PressureLine>,
}

/// Pressure for cpu, memory and io.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct PsiSample {
    /// CPU pressure.
    pub cpu: Option<PressureSample>,
    /// Memory pressure.
    pub memory: Option<PressureSample>,
    /// IO pressure.
    pub io: Option<PressureSample>,
}

impl From<PsiLine> for PressureLine {
    fn from(l: PsiLine) -> Self {
        PressureLine {
            avg10: l.avg10,
            avg60: l.avg60,
            avg300: l.avg300,
            stalled_seconds_total: l.total_us as f64 / 1e6,
        }
    }
}

impl From<Psi> for PressureSample {
    fn from(p: Psi) -> Self {
        PressureSample {
            some: p.some.into(),
            full: p.full.map(Into::into),
        }
    }
}
