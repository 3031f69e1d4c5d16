//! Writing back what a pass found: this node's entry in each policy's status
//! (a merge patch of `status.nodes.<node>` only, so nodes never overwrite
//! each other; written when it changes) and Events on pods (a Warning when
//! the set of degraded floors changes, a Normal one when they hold again).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter as EventReporter};
use kube::{Api, Client};
use serde_json::json;
use tracing::warn;

use super::generations;
use super::pass::PassResult;
use crate::policy::{MinimalReservationPolicy, NodeStatus};

/// The reporting controller named on Events.
pub const CONTROLLER: &str = "darosd";
/// Event reasons.
pub const REASON_DEGRADED: &str = "QoSFloorsDegraded";
/// A pod's floors hold again.
pub const REASON_HELD: &str = "QoSFloorsEnforced";

pub(super) struct Reporter {
    client: Client,
    node: String,
    recorder: Recorder,
    // What was last written per policy: the status, its generation and UID.
    written: BTreeMap<String, (NodeStatus, Option<i64>, Option<String>)>,
    told: BTreeMap<String, Vec<String>>,
}

impl Reporter {
    pub(super) fn new(client: Client, node: &str) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            EventReporter {
                controller: CONTROLLER.into(),
                instance: Some(node.to_string()),
            },
        );
        Reporter {
            client,
            node: node.to_string(),
            recorder,
            written: BTreeMap::new(),
            told: BTreeMap::new(),
        }
    }

    pub(super) async fn write(
        &mut self,
        policies: &[Arc<MinimalReservationPolicy>],
        r: &PassResult,
    ) {
        let gens = generations(policies);
        let api = Api::<MinimalReservationPolicy>::all(self.client.clone());
        self.written.retain(|name, _| gens.contains_key(name));
        for (name, st) in &r.statuses {
            let (generation, uid) = gens.get(name).cloned().unwrap_or_default();
            let now = (st.clone(), generation, uid);
            if self.written.get(name) == Some(&now) {
                continue;
            }
            // `reasons` always present: a merge patch leaves an omitted list as it was.
            let patch = json!({"status": {
                "nodes": {self.node.clone(): {
                    "enforced": st.enforced, "degraded": st.degraded, "reasons": st.reasons,
                }},
                "observedGeneration": generation,
            }});
            match api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.written.insert(name.clone(), now);
                }
                Err(e) => {
                    warn!(policy = %name, error = %e, "cannot write the policy's status (retried on the next pass)")
                }
            }
        }
        let mut still = BTreeMap::new();
        for p in &r.pods {
            if p.pod.phase == "Pending" {
                // Its cgroup may not exist yet: the status says so, an Event would be noise.
                continue;
            }
            let before = self.told.get(&p.pod.uid);
            let mut now = p.degraded.clone();
            now.sort();
            if before != Some(&now) && !(before.is_none() && now.is_empty()) {
                let (type_, reason, note) = if now.is_empty() {
                    (
                        EventType::Normal,
                        REASON_HELD,
                        format!("every floor of policy {} holds", p.policy),
                    )
                } else {
                    (
                        EventType::Warning,
                        REASON_DEGRADED,
                        format!("policy {}: {}", p.policy, now.join("; ")),
                    )
                };
                let ev = Event {
                    type_,
                    reason: reason.into(),
                    note: Some(truncate(note, 1000)),
                    action: "EnforceQoS".into(),
                    secondary: None,
                };
                let reference = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(p.pod.name.clone()),
                    namespace: Some(p.pod.namespace.clone()),
                    uid: Some(p.pod.uid.clone()),
                    ..ObjectReference::default()
                };
                if let Err(e) = self.recorder.publish(&ev, &reference).await {
                    warn!(pod = %p.pod.key(), error = %e, "cannot record an Event on the pod (retried on the next pass)");
                    if let Some(b) = before {
                        still.insert(p.pod.uid.clone(), b.clone());
                    }
                    continue;
                }
            }
            still.insert(p.pod.uid.clone(), now);
        }
        self.told = still;
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}
