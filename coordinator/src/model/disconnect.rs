//! What happens to a workload's instances when their node goes silent (like
//! Nomad's `disconnect` block): how long the coordinator keeps them before
//! they are lost, whether lost instances are placed elsewhere, and whether
//! the silent node stops its own copies (at-most-once).
//!
//! A node is marked Down by the leader after `mesh.node_down_after` (10 s by
//! default) without a gossip heartbeat; its instances then count as
//! unreachable (the application is Degraded, nothing moves) for `lostAfter`.
//! Defaults keep a GC pause, a 6 s SIGSTOP or a quick agent restart from
//! moving anything, and let a crashed node's work move within about 40 s.

use super::time::DurationMs;
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};

/// Disconnect handling of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DisconnectPolicy {
    /// How long after its node was marked Down an instance is kept before it
    /// is lost (default 30s).
    #[serde(default = "default_lost_after")]
    pub lost_after: DurationMs,
    /// Place lost instances on another node (default true); false keeps them
    /// on their node, failed, until it returns.
    #[serde(default = "yes")]
    pub replace: bool,
    /// The node itself stops the instance after this long without contact with
    /// the servers (default: never). Set it to at most `mesh.node_down_after +
    /// lostAfter` so that a replacement never runs beside the old copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_on_client_after: Option<DurationMs>,
}

fn default_lost_after() -> DurationMs {
    DurationMs::from_secs(30)
}

fn yes() -> bool {
    true
}

impl Default for DisconnectPolicy {
    fn default() -> Self {
        Self {
            lost_after: default_lost_after(),
            replace: true,
            stop_on_client_after: None,
        }
    }
}

impl DisconnectPolicy {
    /// Checks the values; `path` is the policy's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.stop_on_client_after == Some(DurationMs(0)) {
            errs.push(FieldError::new(
                join(path, "stopOnClientAfter"),
                "must be more than 0 (a node briefly out of touch would stop everything)",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let d: DisconnectPolicy = serde_json::from_str("{}").unwrap();
        assert_eq!(d, DisconnectPolicy::default());
        assert_eq!(d.lost_after, DurationMs(30_000));
        let bad = DisconnectPolicy {
            stop_on_client_after: Some(DurationMs(0)),
            ..d
        };
        assert_eq!(
            bad.validate("spec.lifecyclePolicy.disconnect")[0].path,
            "spec.lifecyclePolicy.disconnect.stopOnClientAfter"
        );
        let e = serde_json::from_str::<DisconnectPolicy>(
            r#"{"lostAfter": "5s", "replace": false, "x": 1}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
    }
}
