//! One reconciling pass over the pods of this node (blocking): resolve
//! each pod, apply or release through the [`PodEnforcer`], and count per
//! policy what holds and what is degraded, with the reasons. Level
//! triggered: the pass works from the whole picture, so a missed watch event
//! is corrected by the next pass.

use super::enforcer::{Applied, PodEnforcer};
use crate::pod::PodFacts;
use crate::policy::{MinimalReservationPolicy, NodeStatus};
use crate::profile::QoSProfile;
use crate::resolve::{Resolution, resolve};
use std::collections::{BTreeMap, BTreeSet};
use tracing::{info, warn};

/// At most this many reasons per policy and node in the status.
pub const MAX_REASONS: usize = 10;

/// What the pass sees.
#[derive(Debug, Default)]
pub struct Picture {
    /// Pods bound to this node.
    pub pods: Vec<PodFacts>,
    /// Namespace labels by name.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Every policy.
    pub policies: Vec<MinimalReservationPolicy>,
    /// Every profile by name.
    pub profiles: BTreeMap<String, QoSProfile>,
}

/// A pod and what is degraded on it (empty: all floors hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOutcome {
    /// The pod.
    pub pod: PodFacts,
    /// The policy that selected it.
    pub policy: String,
    /// Degraded floors or why nothing was applied.
    pub degraded: Vec<String>,
}

/// What a pass did.
#[derive(Debug, Default)]
pub struct PassResult {
    /// This node's status in each policy (every policy, pods or not).
    pub statuses: BTreeMap<String, NodeStatus>,
    /// Every selected pod.
    pub pods: Vec<PodOutcome>,
    /// Pods put under a class (or changed) in this pass.
    pub applied: usize,
    /// Pods released in this pass.
    pub released: usize,
}

/// Runs one pass.
pub fn pass(p: &Picture, enforcer: &dyn PodEnforcer) -> PassResult {
    let mut out = PassResult::default();
    for pol in &p.policies {
        if let Some(n) = &pol.metadata.name {
            out.statuses.insert(n.clone(), NodeStatus::default());
        }
    }
    let enforced = enforcer.enforced();
    let empty = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for pod in p.pods.iter().filter(|p| !p.ended()) {
        seen.insert(pod.uid.clone());
        let ns = p.namespaces.get(&pod.namespace).unwrap_or(&empty);
        let res = resolve(pod, ns, &p.policies, &p.profiles);
        if let Some(won) = res.policy() {
            // Conflicts are reported where the losing policy's owner looks.
            for lost in p.policies.iter().filter(|q| {
                q.metadata.name.as_deref() != Some(won)
                    && q.spec.selects(&pod.namespace, ns, &pod.labels)
            }) {
                if let Some(name) = &lost.metadata.name {
                    let st = out.statuses.entry(name.clone()).or_default();
                    if st.reasons.len() < MAX_REASONS {
                        st.reasons.push(format!(
                            "{}: not applied, policy {won} also selects it and wins (higher priority, then name)",
                            pod.key()
                        ));
                    }
                }
            }
        }
        let release = |out: &mut PassResult| {
            if enforced.contains_key(&pod.uid) {
                match enforcer.release(&pod.uid) {
                    Ok(()) => {
                        info!(pod = %pod.key(), "no policy selects the pod any more: its cgroup's values restored");
                        out.released += 1;
                    }
                    Err(e) => {
                        warn!(pod = %pod.key(), error = %e, "cannot restore the pod's cgroup")
                    }
                }
            }
        };
        let (policy, degraded) = match res {
            Resolution::Unselected => {
                release(&mut out);
                continue;
            }
            Resolution::Refused { policy, reason } => {
                release(&mut out);
                (policy, vec![reason])
            }
            Resolution::Enforce(d) => {
                if let Some(why) = enforcer.held_elsewhere(&pod.uid) {
                    // The operator's class wins; ours is not kept beside it.
                    release(&mut out);
                    (d.policy, vec![why])
                } else {
                    let applied: Result<Applied, String> = match enforced.get(&pod.uid) {
                        // Unchanged: the QoS service keeps it (and re-checks it on its timer).
                        Some(a) if a.class == d.class && a.profile == d.profile => Ok(a.clone()),
                        _ => {
                            let r = enforcer.enforce(pod, d.class, &d.profile);
                            if r.is_ok() {
                                out.applied += 1;
                                info!(pod = %pod.key(), policy = %d.policy, class = %d.class, notes = ?d.notes, "pod under its policy's class");
                            }
                            r
                        }
                    };
                    match applied {
                        Ok(a) => (d.policy, a.degraded),
                        Err(e) => (d.policy, vec![e]),
                    }
                }
            }
        };
        let st = out.statuses.entry(policy.clone()).or_default();
        if degraded.is_empty() {
            st.enforced += 1;
        } else {
            st.degraded += 1;
            for r in &degraded {
                if st.reasons.len() < MAX_REASONS {
                    st.reasons.push(format!("{}: {r}", pod.key()));
                }
            }
        }
        out.pods.push(PodOutcome {
            pod: pod.clone(),
            policy,
            degraded,
        });
    }
    for uid in enforced.keys().filter(|u| !seen.contains(*u)) {
        // The pod is gone (or ended): forget it; its cgroup goes with it.
        match enforcer.release(uid) {
            Ok(()) => out.released += 1,
            Err(e) => warn!(pod_uid = %uid, error = %e, "cannot release a pod that is gone"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::KubeQos;
    use daros_coordinator::{Bytes, MilliCpu, QosClass, ResourceBounds, ResourceProfile};
    use serde_json::json;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recording {
        held: Mutex<BTreeMap<String, Applied>>,
        calls: Mutex<Vec<String>>,
    }

    impl PodEnforcer for Recording {
        fn enforced(&self) -> BTreeMap<String, Applied> {
            self.held.lock().unwrap().clone()
        }
        fn enforce(
            &self,
            pod: &PodFacts,
            class: QosClass,
            profile: &ResourceProfile,
        ) -> Result<Applied, String> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("enforce {}", pod.uid));
            let a = Applied {
                class,
                profile: *profile,
                degraded: if profile.memory.reservation.is_some() {
                    vec!["memory.min: v1".into()]
                } else {
                    vec![]
                },
            };
            self.held.lock().unwrap().insert(pod.uid.clone(), a.clone());
            Ok(a)
        }
        fn release(&self, uid: &str) -> Result<(), String> {
            self.calls.lock().unwrap().push(format!("release {uid}"));
            self.held.lock().unwrap().remove(uid);
            Ok(())
        }
        fn held_elsewhere(&self, _: &str) -> Option<String> {
            None
        }
    }

    fn pod(uid: &str, ns: &str) -> PodFacts {
        PodFacts {
            uid: uid.into(),
            namespace: ns.into(),
            name: uid.into(),
            labels: BTreeMap::new(),
            qos: Some(KubeQos::Guaranteed),
            phase: "Running".into(),
            cpu: ResourceBounds {
                request: Some(MilliCpu(500)),
                limit: Some(MilliCpu(500)),
                reservation: None,
            },
            memory: ResourceBounds {
                request: Some(Bytes::from_mib(128)),
                limit: Some(Bytes::from_mib(128)),
                reservation: None,
            },
            daros_owned: false,
            problems: vec![],
        }
    }

    fn policy(name: &str, spec: serde_json::Value) -> MinimalReservationPolicy {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    }

    #[test]
    fn applies_once_counts_per_policy_and_releases_what_is_no_longer_selected() {
        let e = Recording::default();
        let mut pic = Picture {
            pods: vec![pod("a", "shop"), pod("b", "shop"), pod("c", "other")],
            policies: vec![
                policy(
                    "cpu",
                    json!({"namespaces": ["shop"], "podSelector": {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, "floors": {"cpu": "100m"}}),
                ),
                policy(
                    "idle",
                    json!({"namespaces": ["none"], "floors": {"memory": "1Mi"}}),
                ),
            ],
            ..Picture::default()
        };
        pic.pods[1].labels.insert("x".into(), "1".into());
        pic.policies
            .push(policy("mem", json!({"namespaces": ["shop"], "podSelector": {"matchLabels": {"x": "1"}}, "floors": {"memory": "64Mi"}})));
        let r = pass(&pic, &e);
        assert_eq!(r.applied, 2);
        assert_eq!(r.statuses["cpu"].enforced, 1);
        assert_eq!(r.statuses["mem"].degraded, 1);
        assert_eq!(r.statuses["mem"].reasons, ["shop/b: memory.min: v1"]);
        assert_eq!(r.statuses["idle"], NodeStatus::default());

        // A second pass changes nothing (no flapping).
        let r = pass(&pic, &e);
        assert_eq!((r.applied, r.released), (0, 0));
        assert_eq!(e.calls.lock().unwrap().len(), 2);
        // The policy goes: its pod is released; a gone pod is released too.
        pic.policies
            .retain(|p| p.metadata.name.as_deref() != Some("mem"));
        pic.pods.remove(0);
        let r = pass(&pic, &e);
        assert_eq!(r.released, 2);
        assert!(e.held.lock().unwrap().is_empty());
        assert!(!e.calls.lock().unwrap().iter().any(|c| c.ends_with(" c")));
    }

    #[test]
    fn a_losing_policy_says_which_one_won() {
        let e = Recording::default();
        let pic = Picture {
            pods: vec![pod("a", "shop")],
            policies: vec![
                policy("wide", json!({"floors": {"cpu": "50m"}, "priority": -1})),
                policy(
                    "narrow",
                    json!({"namespaces": ["shop"], "floors": {"cpu": "100m"}}),
                ),
            ],
            ..Picture::default()
        };
        let r = pass(&pic, &e);
        assert_eq!(r.statuses["narrow"].enforced, 1);
        assert_eq!(r.statuses["wide"].enforced, 0);
        assert_eq!(
            r.statuses["wide"].reasons,
            [
                "shop/a: not applied, policy narrow also selects it and wins (higher priority, then name)"
            ]
        );
    }
}
