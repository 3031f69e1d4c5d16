//! What an operator asks for one workload: a [`QosClass`] and a
//! [`ResourceProfile`] (both from `daros-coordinator`), completed for the class
//! and validated with field paths.

use daros_coordinator::{
    FieldError, MinimalReservation, QosClass, ResourceBounds, ResourceProfile,
};
use serde::{Deserialize, Serialize};

/// A class and its profile, valid together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QosSpec {
    /// QoS class.
    pub class: QosClass,
    /// Requests, limits and reservations.
    #[serde(default)]
    pub profile: ResourceProfile,
}

/// Fills what a Guaranteed class implies: cpu and memory need request == limit,
/// so a missing one takes the other, and with both missing they take the
/// reservation (`--cpu-min 1` alone means request = limit = reservation = 1).
pub fn complete(class: QosClass, mut profile: ResourceProfile) -> ResourceProfile {
    fn fill<T: Copy>(b: &mut ResourceBounds<T>) {
        match (b.request, b.limit) {
            (Some(r), None) => b.limit = Some(r),
            (None, Some(l)) => b.request = Some(l),
            (None, None) => {
                b.request = b.reservation;
                b.limit = b.reservation;
            }
            (Some(_), Some(_)) => {}
        }
    }
    if matches!(class, QosClass::GuaranteedPro | QosClass::Guaranteed) {
        fill(&mut profile.cpu);
        fill(&mut profile.memory);
    }
    profile
}

impl QosSpec {
    /// Completes `profile` for `class` and validates both; errors name fields
    /// under `path` (e.g. `profile.memory.reservation`).
    pub fn new(
        class: QosClass,
        profile: ResourceProfile,
        path: &str,
    ) -> Result<Self, Vec<FieldError>> {
        let profile = complete(class, profile);
        let mut errs = profile.validate(path);
        if errs.is_empty() {
            errs.extend(class.validate(&profile, path));
        }
        if errs.is_empty() {
            Ok(QosSpec { class, profile })
        } else {
            Err(errs)
        }
    }

    /// The MinimalReservation (empty unless GuaranteedPro).
    pub fn reservation(&self) -> MinimalReservation {
        if self.class == QosClass::GuaranteedPro {
            MinimalReservation::from_profile(&self.profile)
        } else {
            MinimalReservation::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::{Bytes, MilliCpu};

    fn profile(json: &str) -> ResourceProfile {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn shorthand_reservations_make_a_valid_guaranteed_pro() {
        let p = profile(r#"{"cpu":{"reservation":"1"},"memory":{"reservation":"512Mi"}}"#);
        let s = QosSpec::new(QosClass::GuaranteedPro, p, "profile").unwrap();
        assert_eq!(s.profile.cpu.request, Some(MilliCpu(1000)));
        assert_eq!(s.profile.cpu.limit, Some(MilliCpu(1000)));
        assert_eq!(s.profile.memory.limit, Some(Bytes::from_mib(512)));
        assert_eq!(s.reservation().memory, Some(Bytes::from_mib(512)));
    }

    #[test]
    fn bad_combinations_name_the_field() {
        let p = profile(r#"{"cpu":{"reservation":"1"}}"#);
        let e = QosSpec::new(QosClass::GuaranteedPro, p, "profile").unwrap_err();
        assert_eq!(e[0].path, "profile.memory.request");
        let p =
            profile(r#"{"memory":{"request":"1Gi","reservation":"2Gi"},"cpu":{"request":"1"}}"#);
        let e = QosSpec::new(QosClass::GuaranteedPro, p, "profile").unwrap_err();
        assert_eq!(e[0].path, "profile.memory.reservation");
        assert!(e[0].reason.contains("exceeds request"), "{}", e[0].reason);
        let e = QosSpec::new(
            QosClass::GuaranteedPro,
            profile(r#"{"cpu":{"request":"1"},"memory":{"request":"1Gi"}}"#),
            "p",
        )
        .unwrap_err();
        assert!(e[0].reason.contains("MinimalReservation"));
        let e = QosSpec::new(
            QosClass::BestEffort,
            profile(r#"{"cpu":{"request":"1"}}"#),
            "p",
        )
        .unwrap_err();
        assert_eq!(e[0].path, "p");
        let e = QosSpec::new(
            QosClass::Burstable,
            profile(r#"{"cpu":{"request":"1","reservation":"1"}}"#),
            "p",
        )
        .unwrap_err();
        assert_eq!(e[0].path, "p.cpu.reservation");
    }

    #[test]
    fn burstable_is_not_completed() {
        let s = QosSpec::new(
            QosClass::Burstable,
            profile(r#"{"cpu":{"request":"1"}}"#),
            "p",
        )
        .unwrap();
        assert_eq!(s.profile.cpu.limit, None);
        assert!(s.reservation().is_empty());
    }

    #[test]
    fn spec_json_refuses_unknown_class_and_fields() {
        let e = serde_json::from_str::<QosSpec>(r#"{"class":"Gold"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `Gold`"), "{e}");
        let e =
            serde_json::from_str::<QosSpec>(r#"{"class":"BestEffort","profle":{}}"#).unwrap_err();
        assert!(e.to_string().contains("profle"), "{e}");
    }
}
