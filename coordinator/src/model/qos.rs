//! QoS classes, their validation rules against a [`ResourceProfile`], and the
//! [`MinimalReservation`] floor of seed 001.

use super::resources::{Bytes, BytesPerSec, MilliCpu, ResourceProfile};
use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// QoS class of a workload.
///
/// Ordering follows protection: `BestEffort < Burstable < Guaranteed <
/// GuaranteedPro`. Under contention the lesser class is held back first
/// (see [`QosClass::HOLD_BACK_ORDER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QosClass {
    /// Guaranteed plus a MinimalReservation floor kept under contention.
    GuaranteedPro,
    /// cpu and memory request == limit.
    Guaranteed,
    /// Some request, limits may be higher.
    Burstable,
    /// No requests or reservations; runs on what is left.
    BestEffort,
}

impl QosClass {
    /// Classes in the order they are held back under contention: first
    /// `BestEffort`, then `Burstable`, then `Guaranteed`; `GuaranteedPro` is
    /// never held below its MinimalReservation.
    pub const HOLD_BACK_ORDER: [QosClass; 4] = [
        QosClass::BestEffort,
        QosClass::Burstable,
        QosClass::Guaranteed,
        QosClass::GuaranteedPro,
    ];

    /// Protection rank: 0 for `BestEffort` (held back first) up to 3 for
    /// `GuaranteedPro`.
    pub const fn protection_rank(self) -> u8 {
        match self {
            QosClass::BestEffort => 0,
            QosClass::Burstable => 1,
            QosClass::Guaranteed => 2,
            QosClass::GuaranteedPro => 3,
        }
    }

    /// The class a profile falls into when the spec does not name one
    /// (Kubernetes rules, plus reservations → `GuaranteedPro`).
    pub fn infer(profile: &ResourceProfile) -> QosClass {
        if profile.has_reservation() {
            QosClass::GuaranteedPro
        } else if is_guaranteed_shape(profile) {
            QosClass::Guaranteed
        } else if profile.has_request() {
            QosClass::Burstable
        } else {
            QosClass::BestEffort
        }
    }

    /// Checks `profile` against this class's rules; `path` is the path of the
    /// profile (errors name the offending field):
    /// - `GuaranteedPro`: the `Guaranteed` rules plus a MinimalReservation (a
    ///   reservation on cpu, memory, network or io);
    /// - `Guaranteed`: cpu and memory each with request == limit, and no
    ///   reservations (those belong to `GuaranteedPro`);
    /// - `Burstable`: at least one request, no reservations;
    /// - `BestEffort`: no requests and no reservations.
    pub fn validate(self, profile: &ResourceProfile, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match self {
            QosClass::GuaranteedPro | QosClass::Guaranteed => {
                check_exact(
                    &mut errs,
                    path,
                    "cpu",
                    profile.cpu.request,
                    profile.cpu.limit,
                );
                check_exact(
                    &mut errs,
                    path,
                    "memory",
                    profile.memory.request,
                    profile.memory.limit,
                );
                if self == QosClass::GuaranteedPro {
                    if MinimalReservation::from_profile(profile).is_empty() {
                        errs.push(FieldError::new(
                            path,
                            "GuaranteedPro needs a MinimalReservation: set a reservation on cpu, memory, network or io",
                        ));
                    }
                } else {
                    refuse_reservations(&mut errs, path, profile, self);
                }
            }
            QosClass::Burstable => {
                if !profile.has_request() {
                    errs.push(FieldError::new(
                        path,
                        "Burstable needs at least one request (for example cpu.request); with none use BestEffort",
                    ));
                }
                refuse_reservations(&mut errs, path, profile, self);
            }
            QosClass::BestEffort => {
                if profile.has_request() {
                    errs.push(FieldError::new(
                        path,
                        "BestEffort takes no requests; use Burstable to ask for a share",
                    ));
                }
                refuse_reservations(&mut errs, path, profile, self);
            }
        }
        errs
    }
}

impl PartialOrd for QosClass {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for QosClass {
    fn cmp(&self, other: &Self) -> Ordering {
        self.protection_rank().cmp(&other.protection_rank())
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QosClass::GuaranteedPro => "GuaranteedPro",
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        })
    }
}

fn is_guaranteed_shape(p: &ResourceProfile) -> bool {
    p.cpu.request.is_some()
        && p.cpu.request == p.cpu.limit
        && p.memory.request.is_some()
        && p.memory.request == p.memory.limit
}

fn check_exact<T: PartialEq + fmt::Display>(
    errs: &mut Vec<FieldError>,
    path: &str,
    res: &str,
    request: Option<T>,
    limit: Option<T>,
) {
    let p = || join(path, res);
    match (request, limit) {
        (Some(r), Some(l)) if r == l => {}
        (Some(r), Some(l)) => errs.push(FieldError::new(
            join(&p(), "limit"),
            format!(
                "Guaranteed classes need {res} request == limit, got request {r} and limit {l}"
            ),
        )),
        (None, _) => errs.push(FieldError::new(
            join(&p(), "request"),
            format!("Guaranteed classes need a {res} request equal to its limit"),
        )),
        (Some(_), None) => errs.push(FieldError::new(
            join(&p(), "limit"),
            format!("Guaranteed classes need a {res} limit equal to its request"),
        )),
    }
}

fn refuse_reservations(
    errs: &mut Vec<FieldError>,
    path: &str,
    p: &ResourceProfile,
    class: QosClass,
) {
    let fields = [
        ("cpu", p.cpu.reservation.is_some()),
        ("memory", p.memory.reservation.is_some()),
        ("gpu", p.gpu.reservation.is_some()),
        ("network.egress", p.network.egress.reservation.is_some()),
        ("network.ingress", p.network.ingress.reservation.is_some()),
        ("io.read", p.io.read.reservation.is_some()),
        ("io.write", p.io.write.reservation.is_some()),
    ];
    for (name, set) in fields {
        if set {
            errs.push(FieldError::new(
                join(&join(path, name), "reservation"),
                format!("{class} cannot carry a reservation; reservations are GuaranteedPro's MinimalReservation"),
            ));
        }
    }
}

/// The floor a workload keeps under contention (seed 001): taken from the
/// `reservation` bounds of its profile. Enforcement maps it to `cpu.min`-like
/// weights, `memory.min`, network floors and io floors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MinimalReservation {
    /// CPU floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<MilliCpu>,
    /// Memory floor (never reclaimed below).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Bytes>,
    /// Outgoing bandwidth floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_egress: Option<BytesPerSec>,
    /// Incoming bandwidth floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_ingress: Option<BytesPerSec>,
    /// Read bandwidth floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_read: Option<BytesPerSec>,
    /// Write bandwidth floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_write: Option<BytesPerSec>,
}

impl MinimalReservation {
    /// The reservations carried by `profile` (empty when it has none).
    pub fn from_profile(profile: &ResourceProfile) -> Self {
        Self {
            cpu: profile.cpu.reservation,
            memory: profile.memory.reservation,
            network_egress: profile.network.egress.reservation,
            network_ingress: profile.network.ingress.reservation,
            io_read: profile.io.read.reservation,
            io_write: profile.io.write.reservation,
        }
    }

    /// True when no floor is set (or every floor is zero).
    pub fn is_empty(&self) -> bool {
        let z = |o: Option<u64>| o.is_none_or(|v| v == 0);
        z(self.cpu.map(MilliCpu::get))
            && z(self.memory.map(Bytes::get))
            && z(self.network_egress.map(BytesPerSec::get))
            && z(self.network_ingress.map(BytesPerSec::get))
            && z(self.io_read.map(BytesPerSec::get))
            && z(self.io_write.map(BytesPerSec::get))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(json: &str) -> ResourceProfile {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn hold_back_order_best_effort_first() {
        assert!(QosClass::BestEffort < QosClass::Burstable);
        assert!(QosClass::Burstable < QosClass::Guaranteed);
        assert!(QosClass::Guaranteed < QosClass::GuaranteedPro);
        let mut v = vec![
            QosClass::GuaranteedPro,
            QosClass::BestEffort,
            QosClass::Guaranteed,
            QosClass::Burstable,
        ];
        v.sort();
        assert_eq!(v, QosClass::HOLD_BACK_ORDER);
    }

    #[test]
    fn guaranteed_pro_needs_reservation() {
        let p = profile(
            r#"{"cpu":{"request":"1","limit":"1"},"memory":{"request":"1Gi","limit":"1Gi"}}"#,
        );
        let errs = QosClass::GuaranteedPro.validate(&p, "r");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].reason.contains("MinimalReservation"));
        assert!(QosClass::Guaranteed.validate(&p, "r").is_empty());
        let p = profile(
            r#"{"cpu":{"request":"1","limit":"1","reservation":"500m"},"memory":{"request":"1Gi","limit":"1Gi","reservation":"512Mi"}}"#,
        );
        assert!(QosClass::GuaranteedPro.validate(&p, "r").is_empty());
        assert_eq!(QosClass::infer(&p), QosClass::GuaranteedPro);
        let m = MinimalReservation::from_profile(&p);
        assert_eq!(m.cpu, Some(MilliCpu(500)));
        assert_eq!(m.memory, Some(Bytes::from_mib(512)));
    }

    #[test]
    fn guaranteed_needs_equal_request_and_limit() {
        let p = profile(r#"{"cpu":{"request":"500m","limit":"1"},"memory":{"request":"1Gi"}}"#);
        let errs = QosClass::Guaranteed.validate(&p, "spec.workloads[0].resources");
        let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.workloads[0].resources.cpu.limit",
                "spec.workloads[0].resources.memory.limit"
            ]
        );
        assert_eq!(QosClass::infer(&p), QosClass::Burstable);
    }

    #[test]
    fn reservations_only_in_guaranteed_pro() {
        let p = profile(r#"{"cpu":{"request":"1","reservation":"500m"}}"#);
        let errs = QosClass::Burstable.validate(&p, "r");
        assert_eq!(errs[0].path, "r.cpu.reservation");
    }

    #[test]
    fn burstable_and_best_effort() {
        let none = ResourceProfile::default();
        assert!(QosClass::BestEffort.validate(&none, "r").is_empty());
        assert_eq!(QosClass::infer(&none), QosClass::BestEffort);
        assert_eq!(QosClass::Burstable.validate(&none, "r").len(), 1);
        let some = profile(r#"{"memory":{"request":"64Mi"}}"#);
        assert!(QosClass::Burstable.validate(&some, "r").is_empty());
        assert_eq!(QosClass::BestEffort.validate(&some, "r").len(), 1);
        let limits_only = profile(r#"{"cpu":{"limit":"1"}}"#);
        assert!(QosClass::BestEffort.validate(&limits_only, "r").is_empty());
    }

    #[test]
    fn minimal_reservation_empty_when_zero() {
        let p = profile(r#"{"cpu":{"reservation":"0"}}"#);
        assert!(MinimalReservation::from_profile(&p).is_empty());
    }
}
