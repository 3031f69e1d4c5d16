//! Which cgroups the datapath counts and caps, and with what: every workload
//! under the managed root, and every discovered cgroup an operator put under a
//! QoS class. Other discovered cgroups are only observed (run-queue statistics
//! need no attachment). Pure: the inputs are the managed workloads' names and
//! the QoS class state.

use daros_coordinator::{BytesPerSec, QosClass, ResourceProfile};
use daros_ebpf::{Cap, NetClass, NetLimits};

use crate::cgroup::CgroupPath;
use crate::qos::report::ClassState;

/// One cgroup the datapath attaches to.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Workload id (`managed/web`, `systemd/nginx.service`).
    pub workload: String,
    /// Cgroup path relative to the hierarchy roots.
    pub cgroup: CgroupPath,
    /// Under the managed root.
    pub managed: bool,
    /// QoS class, if the workload is under one.
    pub class: Option<QosClass>,
    /// Caps from the class's network limits.
    pub limits: NetLimits,
    /// Egress floor (MinimalReservation), bytes/s.
    pub egress_floor: Option<u64>,
    /// Ingress floor, bytes/s.
    pub ingress_floor: Option<u64>,
}

impl Target {
    /// The class the floor loop treats it as: a workload without a class has no
    /// guarantee, so it counts as BestEffort.
    pub fn net_class(&self) -> NetClass {
        net_class(self.class.unwrap_or(QosClass::BestEffort))
    }
}

/// A QoS class as the floor controller sees it.
pub fn net_class(c: QosClass) -> NetClass {
    match c {
        QosClass::GuaranteedPro => NetClass::GuaranteedPro,
        QosClass::Guaranteed => NetClass::Guaranteed,
        QosClass::Burstable => NetClass::Burstable,
        QosClass::BestEffort => NetClass::BestEffort,
    }
}

/// The caps a profile's network limits ask for.
pub fn limits(profile: &ResourceProfile) -> NetLimits {
    let cap = |l: Option<BytesPerSec>| l.map(|v| Cap::rate(v.get()));
    NetLimits {
        egress: cap(profile.network.egress.limit),
        ingress: cap(profile.network.ingress.limit),
        ingress_ecn: false,
    }
}

/// Targets from the managed workloads (`names` under `managed_root`) and the
/// QoS class state. Sorted by workload id.
pub fn targets(managed_root: &CgroupPath, names: &[String], classes: &[ClassState]) -> Vec<Target> {
    let from_class =
        |workload: String, cgroup: CgroupPath, managed: bool, c: Option<&ClassState>| {
            let (class, limits, floors) = match c {
                Some(c) => (
                    Some(c.class),
                    limits(&c.profile),
                    (
                        c.reservation.network_egress.map(BytesPerSec::get),
                        c.reservation.network_ingress.map(BytesPerSec::get),
                    ),
                ),
                None => (None, NetLimits::accounting(), (None, None)),
            };
            Target {
                workload,
                cgroup,
                managed,
                class,
                limits,
                egress_floor: floors.0.filter(|f| *f > 0),
                ingress_floor: floors.1.filter(|f| *f > 0),
            }
        };
    let mut out: Vec<Target> = Vec::new();
    for name in names {
        let Ok(cgroup) = managed_root.join(name) else {
            continue;
        };
        let id = format!("managed/{name}");
        let class = classes.iter().find(|c| c.workload == id);
        out.push(from_class(id, cgroup, true, class));
    }
    for c in classes {
        let Ok(cgroup) = CgroupPath::new(&c.cgroup) else {
            continue;
        };
        if cgroup.starts_with(managed_root) || cgroup.as_str().is_empty() {
            continue; // managed: listed above while its directory exists
        }
        out.push(from_class(c.workload.clone(), cgroup, false, Some(c)));
    }
    out.sort_by(|a, b| a.workload.cmp(&b.workload));
    out.dedup_by(|a, b| a.workload == b.workload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use daros_coordinator::MinimalReservation;

    fn class(id: &str, cgroup: &str, class: QosClass, profile: &str) -> ClassState {
        let profile: ResourceProfile = serde_json::from_str(profile).unwrap();
        let reservation = if class == QosClass::GuaranteedPro {
            MinimalReservation::from_profile(&profile)
        } else {
            MinimalReservation::default()
        };
        ClassState {
            workload: id.into(),
            cgroup: cgroup.into(),
            class,
            reservation,
            profile,
        }
    }

    #[test]
    fn managed_workloads_and_classified_discovered_ones() {
        let root = CgroupPath::new("daros").unwrap();
        let classes = vec![
            class(
                "managed/web",
                "daros/web",
                QosClass::GuaranteedPro,
                r#"{"cpu":{"request":"1"},"memory":{"request":"1Gi"},"network":{"egress":{"reservation":"20MB/s","limit":"100MB/s"}}}"#,
            ),
            class(
                "systemd/nginx.service",
                "system.slice/nginx.service",
                QosClass::Burstable,
                r#"{"network":{"ingress":{"limit":"1MB/s"}}}"#,
            ),
            // a class on a managed workload whose cgroup is gone: not a target
            class("managed/gone", "daros/gone", QosClass::BestEffort, "{}"),
        ];
        let t = targets(&root, &["batch".into(), "web".into()], &classes);
        let ids: Vec<&str> = t.iter().map(|t| t.workload.as_str()).collect();
        assert_eq!(
            ids,
            vec!["managed/batch", "managed/web", "systemd/nginx.service"]
        );
        let batch = &t[0];
        assert_eq!(batch.class, None);
        assert_eq!(batch.net_class(), NetClass::BestEffort);
        assert_eq!(batch.limits, NetLimits::accounting());
        let web = &t[1];
        assert_eq!(web.cgroup.as_str(), "daros/web");
        assert!(web.managed);
        assert_eq!(web.egress_floor, Some(20_000_000));
        assert_eq!(web.ingress_floor, None);
        assert_eq!(web.limits.egress, Some(Cap::rate(100_000_000)));
        assert_eq!(web.net_class(), NetClass::GuaranteedPro);
        let nginx = &t[2];
        assert!(!nginx.managed);
        assert_eq!(nginx.cgroup.as_str(), "system.slice/nginx.service");
        assert_eq!(nginx.limits.ingress, Some(Cap::rate(1_000_000)));
        assert_eq!(nginx.egress_floor, None);
    }

    #[test]
    fn only_guaranteed_pro_carries_floors() {
        let root = CgroupPath::new("daros").unwrap();
        let classes = vec![class(
            "managed/b",
            "daros/b",
            QosClass::Burstable,
            r#"{"network":{"egress":{"request":"10MB/s"}}}"#,
        )];
        let t = targets(&root, &["b".into()], &classes);
        assert_eq!(t[0].egress_floor, None);
        assert_eq!(t[0].net_class(), NetClass::Burstable);
    }
}
