//! Per-resource floors (MinimalReservation) as a Kubernetes user writes
//! them: quantities as strings (`"500m"`, `"1Gi"`, `"50MB/s"`), parsed with
//! D-AROS's own parsers so that a bad one is refused naming its field.

use daros_coordinator::{Bytes, BytesPerSec, FieldError, MilliCpu};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Floors kept for a pod under contention; every one optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Floors {
    /// CPU (`"500m"`, `"2"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory (`"512Mi"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// IO read bandwidth (`"50MB/s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_read: Option<String>,
    /// IO write bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_write: Option<String>,
    /// Network egress bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_egress: Option<String>,
    /// Network ingress bandwidth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_ingress: Option<String>,
}

impl Floors {
    /// Field errors under `path` (`spec.floors`).
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut e = Vec::new();
        let mut check =
            |name: &str, v: &Option<String>, ok: &dyn Fn(&str) -> Result<(), String>| {
                if let Some(v) = v
                    && let Err(why) = ok(v)
                {
                    e.push(FieldError::new(
                        format!("{path}.{name}"),
                        format!("{v:?}: {why}"),
                    ));
                }
            };
        let cpu = |s: &str| s.parse::<MilliCpu>().map(|_| ()).map_err(|e| e.to_string());
        let bytes = |s: &str| s.parse::<Bytes>().map(|_| ()).map_err(|e| e.to_string());
        let rate = |s: &str| {
            s.parse::<BytesPerSec>()
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        check("cpu", &self.cpu, &cpu);
        check("memory", &self.memory, &bytes);
        check("ioRead", &self.io_read, &rate);
        check("ioWrite", &self.io_write, &rate);
        check("networkEgress", &self.network_egress, &rate);
        check("networkIngress", &self.network_ingress, &rate);
        e
    }

    /// True when no floor is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}
