//! The pure mapping `(class, profile, node facts, target facts) → knob plans`,
//! for cgroup v2 and for the v1/hybrid fallback. The table and its reasons
//! are in `docs/qos.md`; every knob ends as a write (read back later), a write
//! the kernel accepts but that is inert here, a degradation with its reason,
//! or a floor held by a mechanism.

use std::collections::BTreeSet;

use daros_coordinator::{Bytes, BytesPerSec, MilliCpu, QosClass, ResourceBounds};

use super::facts::{CpuAssignment, NodeFacts, TargetFacts};
use super::knob::{Knob, KnobPlan, PlanAction};
use super::spec::QosSpec;
use crate::cgroup::CgroupMode;
use crate::cgroup::v2::cpu::DEFAULT_PERIOD_US;
use crate::cgroup::v2::cpuset::format_list;
use crate::cgroup::v2::io::IoMaxLine;

/// Smallest `cpu.max` quota the kernel accepts, in microseconds.
pub const MIN_QUOTA_US: u64 = 1000;

/// kubelet's CPU shares for a request: `max(2, millicores * 1024 / 1000)`, at most 262144.
pub fn cpu_shares(m: Option<MilliCpu>) -> u64 {
    let millis = m.map_or(0, MilliCpu::millis);
    (millis.saturating_mul(1024) / 1000).clamp(2, 262_144)
}

/// kubelet's shares → `cpu.weight` (`1 + (shares − 2) · 9999 / 262142`).
pub fn shares_to_weight(shares: u64) -> u64 {
    1 + (shares.saturating_sub(2) * 9999) / 262_142
}

/// `cpu.weight` for a class and its CPU bounds: BestEffort 1, otherwise the
/// kubelet weight of the request (or the reservation).
pub fn cpu_weight(class: QosClass, cpu: &ResourceBounds<MilliCpu>) -> u64 {
    // BestEffort's 2 shares are weight 1.
    shares_to_weight(cpu_shares_of(class, cpu))
}

/// v1 `cpu.shares` for a class and its CPU bounds: BestEffort 2, otherwise
/// kubelet's shares of the request (or the reservation).
pub fn cpu_shares_of(class: QosClass, cpu: &ResourceBounds<MilliCpu>) -> u64 {
    match class {
        QosClass::BestEffort => 2,
        _ => cpu_shares(cpu.request.or(cpu.reservation)),
    }
}

/// `io.weight` (and BFQ weight) per class.
pub fn io_weight(class: QosClass) -> u64 {
    match class {
        QosClass::GuaranteedPro => 1000,
        QosClass::Guaranteed => 500,
        QosClass::Burstable => 100,
        QosClass::BestEffort => 1,
    }
}

/// A CPU limit as a CFS quota per `period_us` (at least [`MIN_QUOTA_US`]).
pub fn quota_us(limit: MilliCpu, period_us: u64) -> u64 {
    (limit.millis().saturating_mul(period_us) / 1000).max(MIN_QUOTA_US)
}

/// kubelet MemoryQoS throttle point for Burstable: `request + 0.9 · (limit − request)`,
/// rounded down to a page.
pub fn burstable_memory_high(mem: &ResourceBounds<Bytes>, page: u64) -> Option<u64> {
    let limit = mem.limit?.get();
    let request = mem.request.map_or(0, Bytes::get).min(limit);
    let high = request + (limit - request) / 10 * 9;
    Some(high / page.max(1) * page.max(1))
}

fn cores(m: MilliCpu) -> String {
    m.to_string()
}

fn bounds_text<T: std::fmt::Display + Copy>(b: &ResourceBounds<T>, what: &str) -> String {
    let mut parts = Vec::new();
    if let Some(r) = b.request {
        parts.push(format!("request {r}"));
    }
    if let Some(l) = b.limit {
        parts.push(format!("limit {l}"));
    }
    if let Some(r) = b.reservation {
        parts.push(format!("reservation {r}"));
    }
    if parts.is_empty() {
        format!("no {what}")
    } else {
        parts.join(", ")
    }
}

/// Plans every knob for `spec` on the node's cgroup version.
pub fn plan(spec: &QosSpec, node: &NodeFacts, target: &TargetFacts) -> Vec<KnobPlan> {
    let mut out = match node.mode {
        CgroupMode::V2 => plan_v2(spec, node, target),
        CgroupMode::V1 | CgroupMode::Hybrid => plan_v1(spec, node, target),
    };
    out.extend(plan_unmanaged_resources(spec, node));
    gate_controllers(&mut out, node, target);
    out
}

/// Turns writes to files of a controller the cgroup does not have into degradations.
fn gate_controllers(plans: &mut [KnobPlan], node: &NodeFacts, target: &TargetFacts) {
    for p in plans.iter_mut() {
        if matches!(
            p.action,
            PlanAction::Degraded(_) | PlanAction::Mechanism { .. }
        ) {
            continue;
        }
        let missing = match p.knob.home() {
            super::knob::Home::V2 => p.knob.v2_controller().filter(|c| !target.controllers.contains(*c)).map(|c| {
                format!(
                    "the {c} controller is not enabled for {}: its parent's cgroup.subtree_control lacks {c} (the agent only enables controllers inside its managed root)",
                    target.cgroup
                )
            }),
            super::knob::Home::V1(c) => (!target.controllers.contains(c)).then(|| {
                format!("no {c} cgroup for {} (the {c} v1 hierarchy is not mounted or lacks it)", target.cgroup)
            }),
            super::knob::Home::None => None,
        };
        if let Some(reason) = missing {
            p.action = PlanAction::Degraded(reason);
        }
    }
    // A floor held through a mechanism needs the controller the loop writes on others.
    for p in plans.iter_mut() {
        let PlanAction::Mechanism { enforced: true, .. } = p.action else {
            continue;
        };
        let need = match (node.mode, p.knob) {
            (CgroupMode::V2, Knob::CpuFloor) => Some("cpu"),
            (CgroupMode::V2, Knob::IoReadFloor | Knob::IoWriteFloor) => Some("io"),
            (_, Knob::CpuFloor) => Some("cpu"),
            (_, Knob::IoReadFloor | Knob::IoWriteFloor) => Some("blkio"),
            _ => None,
        };
        if let Some(c) = need
            && !target.controllers.contains(c)
        {
            p.action = PlanAction::Degraded(format!(
                "the {c} controller is not available to {}, so the protection loop cannot measure or protect this floor",
                target.cgroup
            ));
        }
    }
}

fn cpu_floor(
    spec: &QosSpec,
    node: &NodeFacts,
    weight_knob: &str,
    weight: u64,
    hold: &str,
) -> Option<KnobPlan> {
    let floor = spec.reservation().cpu.filter(|c| !c.is_zero())?;
    let requested = format!("reservation {}", cores(floor));
    Some(if node.protection {
        KnobPlan {
            knob: Knob::CpuFloor,
            requested,
            action: PlanAction::Mechanism {
                enforced: true,
                how: format!(
                    "no kernel CPU floor exists: {weight_knob} {weight} plus the protection loop, which holds BestEffort then Burstable workloads through {hold} while this floor is short"
                ),
            },
        }
    } else {
        KnobPlan::degraded(
            Knob::CpuFloor,
            requested,
            format!(
                "no kernel CPU floor exists and the protection loop is off ([qos] protection = false): only {weight_knob} {weight} protects it"
            ),
        )
    })
}

fn io_floors(spec: &QosSpec, node: &NodeFacts, hold: &str) -> Vec<KnobPlan> {
    let r = spec.reservation();
    [(Knob::IoReadFloor, r.io_read), (Knob::IoWriteFloor, r.io_write)]
        .into_iter()
        .filter_map(|(k, v)| {
            let v = v.filter(|v| !v.is_zero())?;
            let requested = format!("reservation {v}");
            Some(if node.disks.is_empty() {
                KnobPlan::degraded(k, requested, "no block devices found on this node")
            } else if node.protection {
                KnobPlan {
                    knob: k,
                    requested,
                    action: PlanAction::Mechanism {
                        enforced: true,
                        how: format!(
                            "no kernel IO floor exists: the protection loop measures this workload's rate and holds BestEffort then Burstable workloads through {hold} on the contended device while it is short"
                        ),
                    },
                }
            } else {
                KnobPlan::degraded(
                    k,
                    requested,
                    "no kernel IO floor exists and the protection loop is off ([qos] protection = false)",
                )
            })
        })
        .collect()
}

fn cpuset_plans(spec: &QosSpec, node: &NodeFacts, target: &TargetFacts, v2: bool) -> Vec<KnobPlan> {
    let (cpus_knob, excl_knob) = if v2 {
        (Knob::CpusetCpus, Knob::CpusetPartition)
    } else {
        (Knob::V1CpusetCpus, Knob::V1CpuExclusive)
    };
    let want = spec.profile.dedicated_cores();
    let cpuset_on = target.controllers.contains("cpuset");
    let mut out = Vec::new();
    match (&target.cpus, want) {
        (CpuAssignment::Dedicated(Ok(set)), Some(n)) => {
            let requested = format!("{n} dedicated cores");
            out.push(KnobPlan::write(
                cpus_knob,
                requested.clone(),
                format_list(set),
            ));
            let excl = if v2 {
                if target
                    .files
                    .contains(crate::cgroup::v2::cpuset::CPUS_PARTITION)
                    && target.parent_partition_root
                {
                    KnobPlan::write(excl_knob, requested, "root")
                } else {
                    KnobPlan::degraded(
                        excl_knob,
                        requested,
                        format!(
                            "cores {} are kept off other QoS workloads (shared pool), but the parent of {} is not a cpuset partition root, so cgroups outside QoS may still run there",
                            format_list(set),
                            target.cgroup
                        ),
                    )
                }
            } else {
                KnobPlan::write(excl_knob, requested, "1")
            };
            out.push(excl);
        }
        (CpuAssignment::Dedicated(Err(reason)), Some(n)) => {
            out.push(KnobPlan::degraded(
                cpus_knob,
                format!("{n} dedicated cores"),
                reason.clone(),
            ));
        }
        (_, Some(n)) => {
            out.push(KnobPlan::degraded(
                cpus_knob,
                format!("{n} dedicated cores"),
                "no cores were assigned",
            ));
        }
        (CpuAssignment::Pool(set), None) if cpuset_on => {
            out.push(KnobPlan::write(
                cpus_knob,
                "shared cores (not dedicated to another workload)",
                format_list(set),
            ));
        }
        (CpuAssignment::Inherit(set), None) if cpuset_on => {
            let value = if v2 { String::new() } else { format_list(set) };
            if v2 || !set.is_empty() {
                out.push(KnobPlan::write(cpus_knob, "no dedicated cores", value));
            }
        }
        _ => {}
    }
    let _ = node;
    out
}

/// Memory knob with the ancestor check: a value above what an outside
/// ancestor protects is written but capped there.
fn protected_memory(
    knob: Knob,
    requested: String,
    value: u64,
    target: &TargetFacts,
    node: &NodeFacts,
) -> KnobPlan {
    let need = match knob {
        Knob::MemoryMin => target.subtree_min.max(value),
        _ => target.subtree_low.max(value),
    };
    let cap = target.ancestors.iter().find_map(|a| {
        let have = match knob {
            Knob::MemoryMin => a.memory_min,
            _ => a.memory_low.max(a.memory_min),
        };
        match have {
            Some(h) if h < need => Some((a.path.clone(), h)),
            None => Some((a.path.clone(), 0)),
            _ => None,
        }
    });
    match cap {
        Some((path, have)) if value > 0 => KnobPlan {
            knob,
            requested,
            action: PlanAction::WriteInert {
                values: vec![value.to_string()],
                reason: format!(
                    "capped by ancestor {path}: its {} is {have} but {need} is needed; a cgroup's protection never exceeds its ancestors' and the agent does not write outside its managed root{}",
                    knob.name(),
                    if node.memory_recursiveprot {
                        ""
                    } else {
                        " (the cgroup2 mount also lacks memory_recursiveprot)"
                    }
                ),
            },
        },
        _ => KnobPlan::write(knob, requested, value.to_string()),
    }
}

fn plan_v2(spec: &QosSpec, node: &NodeFacts, target: &TargetFacts) -> Vec<KnobPlan> {
    let p = &spec.profile;
    let class = spec.class;
    let mut out = Vec::new();

    // CPU
    let weight = cpu_weight(class, &p.cpu);
    let weight_req = match class {
        QosClass::BestEffort => "BestEffort: lowest weight".to_string(),
        _ => bounds_text(&p.cpu, "cpu request"),
    };
    out.push(KnobPlan::write(
        Knob::CpuWeight,
        weight_req,
        weight.to_string(),
    ));
    out.push(match p.cpu.limit {
        Some(l) => KnobPlan::write(
            Knob::CpuMax,
            format!("limit {}", cores(l)),
            format!("{} {DEFAULT_PERIOD_US}", quota_us(l, DEFAULT_PERIOD_US)),
        ),
        None => KnobPlan::write(Knob::CpuMax, "no limit", format!("max {DEFAULT_PERIOD_US}")),
    });
    out.extend(cpu_floor(spec, node, "cpu.weight", weight, "cpu.max"));
    out.extend(cpuset_plans(spec, node, target, true));

    // Memory
    let page = node.page_size.max(1);
    let r = spec.reservation();
    let min = r.memory.map_or(0, Bytes::get);
    out.push(protected_memory(
        Knob::MemoryMin,
        r.memory.map_or_else(
            || "no reservation".to_string(),
            |m| format!("reservation {m}"),
        ),
        min,
        target,
        node,
    ));
    let low = match class {
        QosClass::BestEffort => 0,
        _ => p.memory.request.map_or(0, Bytes::get),
    };
    out.push(protected_memory(
        Knob::MemoryLow,
        p.memory
            .request
            .filter(|_| class != QosClass::BestEffort)
            .map_or_else(|| "no request".to_string(), |m| format!("request {m}")),
        low,
        target,
        node,
    ));
    out.push(match (class, burstable_memory_high(&p.memory, page)) {
        (QosClass::Burstable, Some(h)) => KnobPlan::write(
            Knob::MemoryHigh,
            format!(
                "{}: throttle at request + 90% of the burst",
                bounds_text(&p.memory, "memory bounds")
            ),
            h.to_string(),
        ),
        _ => KnobPlan::write(Knob::MemoryHigh, "no throttle point", "max"),
    });
    out.push(match p.memory.limit {
        Some(l) => KnobPlan::write(Knob::MemoryMax, format!("limit {l}"), l.get().to_string()),
        None => KnobPlan::write(Knob::MemoryMax, "no limit", "max"),
    });

    // IO
    let w = io_weight(class);
    let w_req = format!("{class}: weight {w}");
    let inert: Vec<&super::facts::DiskFacts> = node.disks.iter().filter(|d| !d.io_cost).collect();
    out.push(if node.disks.is_empty() {
        KnobPlan::degraded(Knob::IoWeight, w_req.clone(), "no block devices found on this node")
    } else if inert.is_empty() {
        KnobPlan::write(Knob::IoWeight, w_req.clone(), format!("default {w}"))
    } else {
        let which: Vec<String> = inert
            .iter()
            .map(|d| format!("{} (scheduler {}, io.cost off)", d.name, d.scheduler))
            .collect();
        KnobPlan {
            knob: Knob::IoWeight,
            requested: w_req.clone(),
            action: PlanAction::WriteInert {
                values: vec![format!("default {w}")],
                reason: format!(
                    "io.weight is accepted but has no effect on {}: it needs io.cost enabled on the device (BFQ reads io.bfq.weight instead); IO floors rely on the protection loop's io.max",
                    which.join(", ")
                ),
            },
        }
    });
    if node.disks.iter().any(|d| d.scheduler == "bfq")
        && target.files.contains(crate::cgroup::v2::io::BFQ_WEIGHT)
    {
        out.push(KnobPlan::write(
            Knob::IoBfqWeight,
            w_req,
            format!("default {}", w.min(1000)),
        ));
    }
    out.push(io_max_plan(p, node));
    out.extend(io_floors(spec, node, "io.max"));

    // PIDs
    out.push(match p.pids {
        Some(n) => KnobPlan::write(Knob::PidsMax, format!("limit {n}"), n.to_string()),
        None => KnobPlan::write(Knob::PidsMax, "no limit", "max"),
    });
    out
}

fn limit_of(b: &ResourceBounds<BytesPerSec>) -> Option<u64> {
    b.limit.map(BytesPerSec::get)
}

fn io_max_plan(p: &daros_coordinator::ResourceProfile, node: &NodeFacts) -> KnobPlan {
    let (r, w) = (limit_of(&p.io.read), limit_of(&p.io.write));
    let requested = match (p.io.read.limit, p.io.write.limit) {
        (None, None) => "no limit".to_string(),
        (r, w) => format!(
            "read {}, write {} (per device)",
            r.map_or("unlimited".into(), |v| v.to_string()),
            w.map_or("unlimited".into(), |v| v.to_string())
        ),
    };
    if node.disks.is_empty() {
        return KnobPlan::degraded(
            Knob::IoMax,
            requested,
            "no block devices found on this node",
        );
    }
    let lines = node
        .disks
        .iter()
        .map(|d| {
            IoMaxLine {
                rbps: r,
                wbps: w,
                ..IoMaxLine::unlimited(d.major, d.minor)
            }
            .render()
        })
        .collect();
    KnobPlan {
        knob: Knob::IoMax,
        requested,
        action: PlanAction::Write(lines),
    }
}

fn plan_v1(spec: &QosSpec, node: &NodeFacts, target: &TargetFacts) -> Vec<KnobPlan> {
    let p = &spec.profile;
    let class = spec.class;
    let mut out = Vec::new();

    // CPU
    let shares = cpu_shares_of(class, &p.cpu);
    out.push(KnobPlan::write(
        Knob::CpuShares,
        match class {
            QosClass::BestEffort => "BestEffort: lowest shares".to_string(),
            _ => bounds_text(&p.cpu, "cpu request"),
        },
        shares.to_string(),
    ));
    let period = DEFAULT_PERIOD_US;
    out.push(KnobPlan::write(
        Knob::CpuCfsPeriod,
        "CFS period 100ms",
        period.to_string(),
    ));
    out.push(match p.cpu.limit {
        Some(l) => KnobPlan::write(
            Knob::CpuCfsQuota,
            format!("limit {}", cores(l)),
            quota_us(l, period).to_string(),
        ),
        None => KnobPlan::write(Knob::CpuCfsQuota, "no limit", "-1"),
    });
    out.extend(cpu_floor(
        spec,
        node,
        "cpu.shares",
        shares,
        "cpu.cfs_quota_us",
    ));
    out.extend(cpuset_plans(spec, node, target, false));

    // Memory
    let r = spec.reservation();
    if let Some(m) = r.memory.filter(|m| !m.is_zero()) {
        out.push(KnobPlan::degraded(
            Knob::V1MemoryFloor,
            format!("reservation {m}"),
            "cgroup v1 has no memory floor (memory.min): nothing keeps reclaim from taking this memory; memory.soft_limit_in_bytes is only a reclaim order, not a protection",
        ));
    }
    out.push(match (class, p.memory.request) {
        (QosClass::BestEffort, _) => KnobPlan::write(Knob::MemorySoftLimit, "BestEffort: reclaimed first", "0"),
        (_, Some(req)) => KnobPlan {
            knob: Knob::MemorySoftLimit,
            requested: format!("request {req} (memory.low)"),
            action: PlanAction::WriteInert {
                values: vec![req.get().to_string()],
                reason: "v1 has no memory.low: the soft limit only makes usage above it reclaimed first under global pressure; it does not protect the request".into(),
            },
        },
        (_, None) => KnobPlan::write(Knob::MemorySoftLimit, "no request", "-1"),
    });
    if class == QosClass::Burstable
        && let Some(h) = burstable_memory_high(&p.memory, node.page_size)
    {
        out.push(KnobPlan::degraded(
            Knob::V1MemoryHigh,
            format!("throttle at {}", Bytes(h)),
            "cgroup v1 has no memory.high: only the hard limit (memory.limit_in_bytes) applies",
        ));
    }
    out.push(match p.memory.limit {
        Some(l) => KnobPlan::write(Knob::MemoryLimit, format!("limit {l}"), l.get().to_string()),
        None => KnobPlan::write(Knob::MemoryLimit, "no limit", "-1"),
    });

    // IO
    let w = io_weight(class);
    let w_req = format!("{class}: weight {w}");
    if target.files.contains(crate::cgroup::v1::blkio::WEIGHT) {
        out.push(KnobPlan::write(
            Knob::BlkioWeight,
            w_req,
            w.clamp(10, 1000).to_string(),
        ));
    } else {
        out.push(KnobPlan::degraded(
            Knob::BlkioWeight,
            w_req,
            "no proportional IO weight on this kernel: blkio.weight needs CFQ (removed in Linux 5.0) and BFQ exposes no v1 weight file here; IO floors rely on the protection loop's blkio.throttle",
        ));
    }
    for (knob, lim) in [
        (Knob::BlkioReadBps, p.io.read.limit),
        (Knob::BlkioWriteBps, p.io.write.limit),
    ] {
        let requested = lim.map_or_else(
            || "no limit".to_string(),
            |l| format!("limit {l} (per device)"),
        );
        if node.disks.is_empty() {
            out.push(KnobPlan::degraded(
                knob,
                requested,
                "no block devices found on this node",
            ));
            continue;
        }
        let v = lim.map_or(0, BytesPerSec::get);
        out.push(KnobPlan {
            knob,
            requested,
            action: PlanAction::Write(
                node.disks
                    .iter()
                    .map(|d| format!("{} {v}", d.dev()))
                    .collect(),
            ),
        });
    }
    out.extend(io_floors(spec, node, "blkio.throttle"));

    // PIDs
    out.push(match p.pids {
        Some(n) => KnobPlan::write(Knob::PidsMax, format!("limit {n}"), n.to_string()),
        None => KnobPlan::write(Knob::PidsMax, "no limit", "max"),
    });
    out
}

/// Network and GPU bounds: not cgroup files. Network caps and floors are
/// the eBPF datapath's (a token bucket per workload and direction; the floor
/// loop caps Burstable and BestEffort traffic while a floor is short), so the
/// report says what it does; GPUs count for placement only.
fn plan_unmanaged_resources(spec: &QosSpec, node: &NodeFacts) -> Vec<KnobPlan> {
    use super::facts::NetworkFacts;
    let p = &spec.profile;
    let mut out = Vec::new();
    for (knob, b) in [
        (Knob::NetworkEgress, &p.network.egress),
        (Knob::NetworkIngress, &p.network.ingress),
    ] {
        if b.is_empty() {
            continue;
        }
        let requested = bounds_text(b, "bound");
        let floor = b.reservation.or(b.request).is_some_and(|v| !v.is_zero());
        let plan = match &node.network {
            NetworkFacts::Off(why) => KnobPlan::degraded(
                knob,
                requested,
                format!(
                    "network caps and floors are the eBPF datapath's, which does not run: {why}"
                ),
            ),
            NetworkFacts::On { floors: Err(why) } if floor => KnobPlan::degraded(
                knob,
                requested,
                format!("the eBPF datapath's floor loop does not run: {why}"),
            ),
            NetworkFacts::On { floors } => {
                let mut how = Vec::new();
                if b.limit.is_some() {
                    how.push("a token bucket on the workload's sockets (cgroup_skb) caps it");
                }
                if floor && floors.is_ok() {
                    how.push(
                        "the floor loop caps Burstable and BestEffort traffic while this floor is short",
                    );
                }
                if how.is_empty() {
                    how.push("counted by the eBPF datapath; nothing to enforce");
                }
                KnobPlan {
                    knob,
                    requested,
                    action: PlanAction::Mechanism {
                        enforced: true,
                        how: format!(
                            "eBPF datapath: {} (attachment per workload: darosctl net)",
                            how.join("; ")
                        ),
                    },
                }
            }
        };
        out.push(plan);
    }
    if !p.gpu.is_empty() {
        out.push(KnobPlan::degraded(
            Knob::Gpu,
            bounds_text(&p.gpu, "bound"),
            "GPUs are not partitioned through cgroups: the request counts for placement only",
        ));
    }
    out
}

/// Inputs of the managed root's plan: the floors of its children.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildFloors {
    /// Child `memory.min`.
    pub memory_min: u64,
    /// Child `memory.low`.
    pub memory_low: u64,
    /// Child CPU floor.
    pub cpu: MilliCpu,
}

/// `cpu.weight` of an intermediate cgroup so that its reserved children are not
/// starved by siblings outside: with siblings of total weight `S` on `n` CPUs,
/// a weight `w ≥ S · F / (n − F)` gives the subtree at least `F` cores under full
/// contention. At least the default 100, at most 10000.
pub fn intermediate_weight(floor: MilliCpu, cpus: u32, sibling_weights: u64) -> u64 {
    let n = u64::from(cpus) * 1000;
    let f = floor.millis();
    if f == 0 {
        return 100;
    }
    if f >= n {
        return 10_000;
    }
    let w = (sibling_weights * f).div_ceil(n - f);
    w.clamp(100, 10_000)
}

/// Plans the floors of an intermediate cgroup of the managed subtree: `memory.min`
/// and `memory.low` are the sums of its children's (v2 only: v1 has neither), and
/// `cpu.weight`/`cpu.shares` are sized against its siblings.
pub fn plan_intermediate(
    children: &[ChildFloors],
    node: &NodeFacts,
    target: &TargetFacts,
    sibling_weights: u64,
) -> Vec<KnobPlan> {
    let min: u64 = children.iter().map(|c| c.memory_min).sum();
    let low: u64 = children.iter().map(|c| c.memory_low).sum();
    let cpu: MilliCpu = children.iter().map(|c| c.cpu).sum();
    let n = children.len();
    let mut out = Vec::new();
    match node.mode {
        CgroupMode::V2 => {
            out.push(protected_memory(
                Knob::MemoryMin,
                format!("sum of {n} children's memory.min"),
                min,
                target,
                node,
            ));
            out.push(protected_memory(
                Knob::MemoryLow,
                format!("sum of {n} children's memory.low"),
                low,
                target,
                node,
            ));
            out.push(KnobPlan::write(
                Knob::CpuWeight,
                format!(
                    "subtree CPU floors {} against sibling weight {sibling_weights}",
                    cores(cpu)
                ),
                intermediate_weight(cpu, node.cpus.len() as u32, sibling_weights).to_string(),
            ));
        }
        CgroupMode::V1 | CgroupMode::Hybrid => {
            let w = intermediate_weight(cpu, node.cpus.len() as u32, sibling_weights);
            out.push(KnobPlan::write(
                Knob::CpuShares,
                format!(
                    "subtree CPU floors {} against sibling shares {sibling_weights}",
                    cores(cpu)
                ),
                (w * 1024 / 100).clamp(2, 262_144).to_string(),
            ));
        }
    }
    gate_controllers(&mut out, node, target);
    out
}

/// The CPUs of `pool` that no workload holds, highest first (CPU 0 last: it
/// usually serves interrupts and the system).
pub fn pick_cores(
    pool: &BTreeSet<u32>,
    taken: &BTreeSet<u32>,
    n: u64,
) -> Result<BTreeSet<u32>, String> {
    let free: Vec<u32> = pool
        .iter()
        .rev()
        .copied()
        .filter(|c| !taken.contains(c))
        .collect();
    // Keep at least one core for everything else.
    let usable = free.len().saturating_sub(1);
    if (usable as u64) < n {
        return Err(format!(
            "{n} dedicated cores asked, {} of {} cores are free and one must stay shared",
            free.len(),
            pool.len()
        ));
    }
    Ok(free.into_iter().take(n as usize).collect())
}

#[cfg(test)]
mod tests;
