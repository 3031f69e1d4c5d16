//! A pod's effective D-AROS class and floors from the policies and profiles
//! that select it (pure: no I/O).
//!
//! - A pod no policy selects is left alone (no cgroup of it is written).
//! - Of the selecting policies the highest `priority` wins, then the smallest
//!   name; the others are named in the notes.
//! - The class starts from the pod's own Kubernetes class; the policy's
//!   profile raises it (a lower one is noted, not applied); floors make it
//!   GuaranteedPro, which keeps floors only for pods whose cpu and memory
//!   requests equal their limits (Guaranteed + MinimalReservation) — a pod of
//!   another shape is refused with the reason rather than given limits it
//!   did not ask for.

use crate::floors::Floors;
use crate::pod::{KubeQos, PodFacts};
use crate::policy::{MinimalReservationPolicy, winner};
use crate::profile::QoSProfile;
use daros_coordinator::{Bytes, BytesPerSec, FieldError, MilliCpu, QosClass, ResourceProfile};
use std::collections::BTreeMap;

/// The class and profile a pod gets, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The policy that won.
    pub policy: String,
    /// The class to apply.
    pub class: QosClass,
    /// The pod's own requests and limits plus the floors as reservations.
    pub profile: ResourceProfile,
    /// Conflicts resolved on the way (other policies, a lower profile).
    pub notes: Vec<String>,
}

/// What to do with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// No policy selects it: leave its cgroup alone.
    Unselected,
    /// Put it under `Desired`.
    Enforce(Box<Desired>),
    /// A policy selects it but cannot be applied: the reason.
    Refused {
        /// The policy that won.
        policy: String,
        /// Why nothing is applied.
        reason: String,
    },
}

impl Resolution {
    /// The winning policy, if any.
    pub fn policy(&self) -> Option<&str> {
        match self {
            Resolution::Unselected => None,
            Resolution::Enforce(d) => Some(&d.policy),
            Resolution::Refused { policy, .. } => Some(policy),
        }
    }
}

fn class_of(q: KubeQos) -> QosClass {
    match q {
        KubeQos::Guaranteed => QosClass::Guaranteed,
        KubeQos::Burstable => QosClass::Burstable,
        KubeQos::BestEffort => QosClass::BestEffort,
    }
}

fn errors(e: &[FieldError]) -> String {
    e.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

// `over` wins field by field.
fn overlay(base: &Floors, over: &Floors) -> Floors {
    let pick = |a: &Option<String>, b: &Option<String>| b.clone().or_else(|| a.clone());
    Floors {
        cpu: pick(&base.cpu, &over.cpu),
        memory: pick(&base.memory, &over.memory),
        io_read: pick(&base.io_read, &over.io_read),
        io_write: pick(&base.io_write, &over.io_write),
        network_egress: pick(&base.network_egress, &over.network_egress),
        network_ingress: pick(&base.network_ingress, &over.network_ingress),
    }
}

// Floors as reservations (already validated: a parse failure leaves none).
fn reserve(profile: &mut ResourceProfile, f: &Floors) {
    let rate = |s: &Option<String>| s.as_deref().and_then(|v| v.parse::<BytesPerSec>().ok());
    profile.cpu.reservation = f.cpu.as_deref().and_then(|v| v.parse::<MilliCpu>().ok());
    profile.memory.reservation = f.memory.as_deref().and_then(|v| v.parse::<Bytes>().ok());
    profile.io.read.reservation = rate(&f.io_read);
    profile.io.write.reservation = rate(&f.io_write);
    profile.network.egress.reservation = rate(&f.network_egress);
    profile.network.ingress.reservation = rate(&f.network_ingress);
}

/// Resolves `pod` (in a namespace labelled `ns_labels`) against every policy
/// and profile.
pub fn resolve(
    pod: &PodFacts,
    ns_labels: &BTreeMap<String, String>,
    policies: &[MinimalReservationPolicy],
    profiles: &BTreeMap<String, QoSProfile>,
) -> Resolution {
    if pod.daros_owned {
        // D-AROS's own pods are under their application's class already.
        return Resolution::Unselected;
    }
    let selecting: Vec<&MinimalReservationPolicy> = policies
        .iter()
        .filter(|p| p.spec.selects(&pod.namespace, ns_labels, &pod.labels))
        .collect();
    let Some(won) = winner(selecting.iter().copied()) else {
        return Resolution::Unselected;
    };
    let policy = won.metadata.name.clone().unwrap_or_default();
    let refuse = |reason: String| Resolution::Refused {
        policy: policy.clone(),
        reason,
    };
    let mut notes = Vec::new();
    if selecting.len() > 1 {
        let others: Vec<String> = selecting
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .filter(|n| *n != policy)
            .collect();
        notes.push(format!(
            "also selected by {}; {policy} wins (priority {}, then name)",
            others.join(", "),
            won.spec.priority
        ));
    }
    let bad = won.spec.validate();
    if !bad.is_empty() {
        return refuse(format!("policy {policy} is invalid: {}", errors(&bad)));
    }
    let profile = match &won.spec.profile {
        None => None,
        Some(name) => match profiles.get(name) {
            None => return refuse(format!("QoSProfile {name} does not exist")),
            Some(p) => {
                let bad = p.spec.validate();
                if !bad.is_empty() {
                    return refuse(format!("QoSProfile {name} is invalid: {}", errors(&bad)));
                }
                Some((name.clone(), p))
            }
        },
    };
    if !pod.problems.is_empty() {
        return refuse(format!(
            "the pod's resources cannot be read: {}",
            pod.problems.join("; ")
        ));
    }
    let Some(own) = pod.qos else {
        return refuse("the pod has no status.qosClass yet".into());
    };
    let own_class = class_of(own);
    let floors = overlay(
        &profile
            .as_ref()
            .map(|(_, p)| p.spec.floors.clone())
            .unwrap_or_default(),
        &won.spec.floors,
    );
    let mut wanted = profile
        .as_ref()
        .map_or(own_class, |(_, p)| p.spec.class.into());
    if !floors.is_empty() {
        if let Some((name, p)) = &profile
            && QosClass::from(p.spec.class) != QosClass::GuaranteedPro
        {
            return refuse(format!(
                "policy {policy} sets floors but its profile {name} is {:?}: floors are kept only for GuaranteedPro",
                p.spec.class
            ));
        }
        wanted = QosClass::GuaranteedPro;
    }
    let class = if wanted < own_class {
        notes.push(format!(
            "the policy asks {wanted}, below the pod's own {}: it keeps {own_class}",
            own.as_str()
        ));
        own_class
    } else {
        wanted
    };
    let mut p = ResourceProfile {
        cpu: pod.cpu,
        memory: pod.memory,
        ..ResourceProfile::default()
    };
    if class == QosClass::GuaranteedPro {
        reserve(&mut p, &floors);
    }
    let mut bad = p.validate("pod");
    if bad.is_empty() {
        bad = class.validate(&p, "pod");
    }
    if !bad.is_empty() {
        return refuse(format!(
            "pod {} (Kubernetes {}) cannot be {class}: {}",
            pod.key(),
            own.as_str(),
            errors(&bad)
        ));
    }
    Resolution::Enforce(Box::new(Desired {
        policy,
        class,
        profile: p,
        notes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, spec: serde_json::Value) -> MinimalReservationPolicy {
        serde_json::from_value(json!({
            "apiVersion": "daros.io/v1alpha1", "kind": "MinimalReservationPolicy",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    }

    fn profiles() -> BTreeMap<String, QoSProfile> {
        let p: QoSProfile = serde_json::from_value(json!({
            "apiVersion": "daros.io/v1alpha1", "kind": "QoSProfile",
            "metadata": {"name": "protected"},
            "spec": {"class": "GuaranteedPro", "floors": {"cpu": "250m", "memory": "64Mi"}},
        }))
        .unwrap();
        let low: QoSProfile = serde_json::from_value(json!({
            "apiVersion": "daros.io/v1alpha1", "kind": "QoSProfile",
            "metadata": {"name": "low"}, "spec": {"class": "Burstable"},
        }))
        .unwrap();
        BTreeMap::from([("protected".into(), p), ("low".into(), low)])
    }

    fn pod(ns: &str, labels: &[(&str, &str)], qos: KubeQos, cpu: u64, mem_mib: u64) -> PodFacts {
        PodFacts {
            uid: "u".into(),
            namespace: ns.into(),
            name: "p".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            qos: Some(qos),
            phase: "Running".into(),
            cpu: daros_coordinator::ResourceBounds {
                request: Some(MilliCpu(cpu)),
                limit: (qos == KubeQos::Guaranteed).then_some(MilliCpu(cpu)),
                reservation: None,
            },
            memory: daros_coordinator::ResourceBounds {
                request: Some(Bytes::from_mib(mem_mib)),
                limit: (qos == KubeQos::Guaranteed).then_some(Bytes::from_mib(mem_mib)),
                reservation: None,
            },
            daros_owned: false,
            problems: vec![],
        }
    }

    #[test]
    fn the_highest_priority_wins_and_the_profile_floors_are_overlaid() {
        let ps = [
            policy(
                "b-low",
                json!({"namespaces": ["shop"], "floors": {"cpu": "100m"}}),
            ),
            policy(
                "a-high",
                json!({"namespaces": ["shop"], "podSelector": {"matchLabels": {"tier": "web"}},
                       "profile": "protected", "floors": {"memory": "96Mi"}, "priority": 5}),
            ),
        ];
        let p = pod("shop", &[("tier", "web")], KubeQos::Guaranteed, 500, 128);
        let Resolution::Enforce(d) = resolve(&p, &BTreeMap::new(), &ps, &profiles()) else {
            panic!()
        };
        assert_eq!(d.policy, "a-high");
        assert_eq!(d.class, QosClass::GuaranteedPro);
        assert_eq!(d.profile.cpu.reservation, Some(MilliCpu(250)));
        assert_eq!(d.profile.memory.reservation, Some(Bytes::from_mib(96)));
        assert_eq!(d.profile.cpu.limit, Some(MilliCpu(500)));
        assert!(d.notes[0].contains("b-low"), "{:?}", d.notes);
        // Another namespace: nobody selects it.
        let other = pod("batch", &[("tier", "web")], KubeQos::Guaranteed, 500, 128);
        assert_eq!(
            resolve(&other, &BTreeMap::new(), &ps, &profiles()),
            Resolution::Unselected
        );
        // Equal priority: the smaller name.
        let ps = [
            policy("zeta", json!({"floors": {"cpu": "100m"}})),
            policy("alpha", json!({"floors": {"cpu": "200m"}})),
        ];
        assert_eq!(
            resolve(&p, &BTreeMap::new(), &ps, &profiles()).policy(),
            Some("alpha")
        );
    }

    #[test]
    fn floors_on_a_pod_without_equal_requests_and_limits_are_refused_with_the_reason() {
        let ps = [policy("f", json!({"floors": {"cpu": "100m"}}))];
        let p = pod("shop", &[], KubeQos::Burstable, 500, 128);
        let Resolution::Refused { policy, reason } =
            resolve(&p, &BTreeMap::new(), &ps, &profiles())
        else {
            panic!()
        };
        assert_eq!(policy, "f");
        assert!(
            reason.contains("Kubernetes Burstable") && reason.contains("pod.cpu.limit"),
            "{reason}"
        );
    }

    #[test]
    fn a_lower_profile_is_noted_and_missing_or_invalid_ones_refuse() {
        let p = pod("shop", &[], KubeQos::Guaranteed, 500, 128);
        let ps = [policy("l", json!({"profile": "low"}))];
        let Resolution::Enforce(d) = resolve(&p, &BTreeMap::new(), &ps, &profiles()) else {
            panic!()
        };
        assert_eq!(d.class, QosClass::Guaranteed);
        assert!(d.notes[0].contains("keeps Guaranteed"), "{:?}", d.notes);
        let ps = [policy("m", json!({"profile": "nope"}))];
        assert!(matches!(
            resolve(&p, &BTreeMap::new(), &ps, &profiles()),
            Resolution::Refused { reason, .. } if reason.contains("QoSProfile nope does not exist")
        ));
        let ps = [policy("bad", json!({"floors": {"cpu": "lots"}}))];
        assert!(matches!(
            resolve(&p, &BTreeMap::new(), &ps, &profiles()),
            Resolution::Refused { reason, .. } if reason.contains("spec.floors.cpu")
        ));
        let mut owned = p.clone();
        owned.daros_owned = true;
        let ps = [policy("f", json!({"floors": {"cpu": "100m"}}))];
        assert_eq!(
            resolve(&owned, &BTreeMap::new(), &ps, &profiles()),
            Resolution::Unselected
        );
    }
}
