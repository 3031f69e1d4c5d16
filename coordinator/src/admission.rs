//! Admission control (seed 000 §5.2 step 1, §7.3.1): validity against the
//! tenant, tenant quota, and the global filters of the effective policy.
//! Every check is recorded, passed or not.

use crate::model::application::Application;
use crate::model::policy::image_matches;
use crate::model::resources::{Bytes, GpuCount, MilliCpu};
use crate::model::tenant::Tenant;
use crate::placement::{Demand, ResVec};
use crate::policy::{EffectivePolicy, PolicyCheck, Resolution};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What an application holds of its tenant's quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// Applications (1 for an admitted application).
    pub apps: u32,
    /// Workload instances.
    pub workloads: u32,
    /// Sum of requests over instances.
    pub request: ResVec,
}

impl Charge {
    /// Sum.
    #[must_use]
    pub fn plus(self, o: Charge) -> Charge {
        Charge {
            apps: self.apps + o.apps,
            workloads: self.workloads + o.workloads,
            request: self.request.plus(o.request),
        }
    }

    /// Difference (clamped at zero).
    #[must_use]
    pub fn minus(self, o: Charge) -> Charge {
        Charge {
            apps: self.apps.saturating_sub(o.apps),
            workloads: self.workloads.saturating_sub(o.workloads),
            request: self.request.minus(o.request),
        }
    }

    /// The charge of `app` with `targets` replicas per workload (missing
    /// workloads count their `min`).
    pub fn of(app: &Application, targets: &BTreeMap<String, u32>) -> Charge {
        let mut c = Charge {
            apps: 1,
            ..Default::default()
        };
        for w in &app.spec.workloads {
            let n = targets.get(&w.name).copied().unwrap_or(w.replicas.min);
            c.workloads += n;
            for r in 0..n {
                c.request = c.request.plus(Demand::of(app, w, r).request);
            }
        }
        c
    }
}

/// Everything admission looks at.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionRequest<'a> {
    /// The application (version being admitted).
    pub app: &'a Application,
    /// Replicas per workload to charge.
    pub targets: &'a BTreeMap<String, u32>,
    /// Its tenant.
    pub tenant: &'a Tenant,
    /// Effective policy.
    pub effective: &'a EffectivePolicy,
    /// How each policy field was decided (to name the deciding policy).
    pub resolutions: &'a [Resolution],
    /// Tenant usage without this application.
    pub tenant_usage: Charge,
    /// Tenant usage in the application's pool without this application.
    pub pool_usage: Charge,
    /// Capacity of the cluster (schedulable nodes).
    pub cluster_capacity: ResVec,
    /// True when the application's pool exists.
    pub pool_exists: bool,
}

/// The verdict and every check behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionResult {
    /// Every check, in order.
    pub checks: Vec<PolicyCheck>,
    /// What the application would hold of the quota.
    pub charge: Charge,
}

impl AdmissionResult {
    /// True when every check passed.
    pub fn admitted(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The failed checks, in words.
    pub fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| format!("{}: {}", c.rule, c.detail))
            .collect()
    }
}

fn decided_by(res: &[Resolution], field: &str) -> Option<String> {
    res.iter()
        .find(|r| r.field == field)
        .map(|r| r.decided_by.clone())
}

/// Checks `after`'s requests against cpu, memory and GPU limits (tenant-wide
/// or of one pool: `rule` names the check, `scope` is said after the resource).
fn request_limits(
    check: &mut impl FnMut(&str, bool, String, Option<String>),
    rule: &str,
    scope: &str,
    after: Charge,
    (cpu, memory, gpu): (Option<MilliCpu>, Option<Bytes>, Option<GpuCount>),
    source: &Option<String>,
) {
    if let Some(max) = cpu {
        check(
            &format!("{rule}.cpu"),
            after.request.cpu <= max.get(),
            format!(
                "cpu requests{scope} {} with this one, quota {max}",
                MilliCpu(after.request.cpu)
            ),
            source.clone(),
        );
    }
    if let Some(max) = memory {
        check(
            &format!("{rule}.memory"),
            after.request.memory <= max.get(),
            format!(
                "memory requests{scope} {} with this one, quota {max}",
                Bytes(after.request.memory)
            ),
            source.clone(),
        );
    }
    if let Some(max) = gpu {
        check(
            &format!("{rule}.gpu"),
            after.request.gpu <= u64::from(max.get()),
            format!(
                "{} GPUs{scope} with this one, quota {max}",
                after.request.gpu
            ),
            source.clone(),
        );
    }
}

/// Runs admission.
pub fn admit(req: &AdmissionRequest<'_>) -> AdmissionResult {
    let app = req.app;
    let t = req.tenant;
    let mut checks = Vec::new();
    let mut check = |rule: &str, passed: bool, detail: String, policy: Option<String>| {
        checks.push(PolicyCheck {
            rule: rule.into(),
            passed,
            detail,
            policy,
        })
    };
    let tenant_src = Some(format!("tenant {}", t.name));

    check(
        "priority",
        app.spec.priority <= t.quota.priority_ceiling,
        format!(
            "priority {} against tenant ceiling {}",
            app.spec.priority, t.quota.priority_ceiling
        ),
        tenant_src.clone(),
    );
    let pool = app.pool();
    check(
        "pool",
        req.pool_exists && t.may_use_pool(pool),
        if !req.pool_exists {
            format!("pool {pool} does not exist")
        } else if !t.may_use_pool(pool) {
            format!("tenant {} may not use pool {pool}", t.name)
        } else {
            format!("pool {pool} allowed")
        },
        tenant_src.clone(),
    );

    // Global filters: runtime types and images of workloads and init jobs.
    let mut runtimes = Vec::new();
    let mut images = Vec::new();
    let filtered =
        req.effective.allowed_runtime_types.is_some() || !req.effective.allowed_images.is_empty();
    for w in app.spec.workloads.iter().filter(|_| filtered) {
        runtimes.push((w.name.clone(), w.runtime.runtime_type));
        images.push((w.name.clone(), w.image.clone()));
        // Every container of a pod: sidecars and init containers too.
        for (at, img) in crate::policy::security::pod_images(w) {
            images.push((format!("{}/{at}", w.name), img));
        }
        for s in crate::traits::sidecar::sidecars(&w.traits) {
            images.push((format!("{}/sidecar/{}", w.name, s.name), Some(s.image)));
        }
        for (_, j) in w.all_init_jobs() {
            let name = format!("{}/init/{}", w.name, j.name);
            runtimes.push((name.clone(), j.runtime.unwrap_or(w.runtime).runtime_type));
            images.push((name, j.image.clone().or_else(|| w.image.clone())));
        }
    }
    // Workflow job steps run a program too: the same filters.
    for (s, _) in app
        .spec
        .workflow
        .iter()
        .flat_map(|wf| wf.all())
        .filter(|_| filtered)
    {
        let Some(t) = crate::jobs::get(&s.kind) else {
            continue;
        };
        let run = crate::jobs::guarded(t.name(), &s.name, || t.run(&s.properties));
        let name = format!("workflow/{}", s.name);
        runtimes.push((name.clone(), crate::model::runtime::RuntimeType::Process));
        images.push((
            name,
            run.ok()
                .and_then(|r| r.ok())
                .and_then(|r| r.argv.first().cloned()),
        ));
    }
    if let Some(allowed) = &req.effective.allowed_runtime_types {
        let bad: Vec<String> = runtimes
            .iter()
            .filter(|(_, r)| !allowed.contains(r))
            .map(|(n, r)| format!("{n} ({r})"))
            .collect();
        let list: Vec<String> = allowed.iter().map(|r| r.to_string()).collect();
        check(
            "allowedRuntimeTypes",
            bad.is_empty(),
            if bad.is_empty() {
                format!("every runtime type is in [{}]", list.join(", "))
            } else {
                format!(
                    "not allowed: {}; allowed: [{}]",
                    bad.join(", "),
                    list.join(", ")
                )
            },
            decided_by(req.resolutions, "allowedRuntimeTypes"),
        );
    }
    for list in &req.effective.allowed_images {
        let bad: Vec<String> = images
            .iter()
            .filter(|(_, img)| {
                img.as_deref()
                    .is_none_or(|i| !list.patterns.iter().any(|p| image_matches(p, i)))
            })
            .map(|(n, img)| match img {
                Some(i) => format!("{n} ({i})"),
                None => format!("{n} (no image given)"),
            })
            .collect();
        check(
            "allowedImages",
            bad.is_empty(),
            if bad.is_empty() {
                format!("every image matches [{}]", list.patterns.join(", "))
            } else {
                format!(
                    "not allowed: {}; allowed: [{}]",
                    bad.join(", "),
                    list.patterns.join(", ")
                )
            },
            Some(list.policy.clone()),
        );
    }

    // The runtime security baseline, on every workload.
    let namespaces = t.owned_namespaces();
    let mut secure = true;
    for w in &app.spec.workloads {
        for (rule, what) in
            crate::policy::security::check_workload(w, &req.effective.security, &namespaces)
        {
            secure = false;
            let key = rule.trim_start_matches("security.").to_string();
            let by = req.effective.security.decided_by.get(&key).cloned();
            let detail = match &by {
                Some(b) => format!("workload {}: {what} (forbidden by {b})", w.name),
                None if rule == "tenant.namespaces" => format!("workload {}: {what}", w.name),
                None => format!(
                    "workload {}: {what} (forbidden by the default baseline)",
                    w.name
                ),
            };
            check(&rule, false, detail, by.or_else(|| tenant_src.clone()));
        }
    }
    if secure {
        check(
            "security",
            true,
            "every workload within the security baseline".into(),
            None,
        );
    }

    // Tenant quota.
    let charge = Charge::of(app, req.targets);
    let after = req.tenant_usage.plus(charge);
    let q = &t.quota;
    if let Some(max) = q.max_applications {
        check(
            "quota.maxApplications",
            after.apps <= max,
            format!("{} applications with this one, quota {max}", after.apps),
            tenant_src.clone(),
        );
    }
    if let Some(max) = q.max_concurrent_workloads {
        check(
            "quota.maxConcurrentWorkloads",
            after.workloads <= max,
            format!(
                "{} workload instances with this one, quota {max}",
                after.workloads
            ),
            tenant_src.clone(),
        );
    }
    request_limits(
        &mut check,
        "quota",
        "",
        after,
        (q.cpu, q.memory, q.gpu),
        &tenant_src,
    );
    // The tenant's share of the application's pool.
    if let Some(pq) = q.pools.get(pool) {
        request_limits(
            &mut check,
            "quota.pools",
            &format!(" in pool {pool}"),
            req.pool_usage.plus(charge),
            (pq.cpu, pq.memory, pq.gpu),
            &Some(format!("tenant {} (pool {pool})", t.name)),
        );
    }

    // Budget: totals at the replica maximum.
    let b = &app.spec.budget;
    if b.cpu.is_some() || b.memory.is_some() || b.gpu.is_some() {
        let mut most = ResVec::default();
        for w in &app.spec.workloads {
            for r in 0..w.replicas.max {
                most = most.plus(Demand::of(app, w, r).request);
            }
        }
        let mut over = Vec::new();
        if let Some(c) = b.cpu.filter(|c| most.cpu > c.get()) {
            over.push(format!("cpu {} > {c}", MilliCpu(most.cpu)));
        }
        if let Some(m) = b.memory.filter(|m| most.memory > m.get()) {
            over.push(format!("memory {} > {m}", Bytes(most.memory)));
        }
        if let Some(g) = b.gpu.filter(|g| most.gpu > u64::from(g.get())) {
            over.push(format!("gpu {} > {g}", most.gpu));
        }
        check(
            "budget",
            over.is_empty(),
            if over.is_empty() {
                format!(
                    "requests at maximum replicas ({}) within budget",
                    most.describe()
                )
            } else {
                format!(
                    "requests at maximum replicas exceed the budget: {}",
                    over.join(", ")
                )
            },
            None,
        );
    }

    // Largest share of the cluster.
    if let Some(share) = req.effective.max_cluster_share {
        let cap = req.cluster_capacity;
        let limit = ResVec {
            cpu: share.apply(cap.cpu),
            memory: share.apply(cap.memory),
            gpu: share.apply(cap.gpu),
        };
        let mut over = Vec::new();
        if cap.cpu > 0 && charge.request.cpu > limit.cpu {
            over.push(format!(
                "cpu {} > {} ({share} of {})",
                MilliCpu(charge.request.cpu),
                MilliCpu(limit.cpu),
                MilliCpu(cap.cpu)
            ));
        }
        if cap.memory > 0 && charge.request.memory > limit.memory {
            over.push(format!(
                "memory {} > {} ({share} of {})",
                Bytes(charge.request.memory),
                Bytes(limit.memory),
                Bytes(cap.memory)
            ));
        }
        if cap.gpu > 0 && charge.request.gpu > limit.gpu {
            over.push(format!(
                "gpu {} > {} ({share} of {})",
                charge.request.gpu, limit.gpu, cap.gpu
            ));
        }
        check(
            "maxClusterShare",
            over.is_empty(),
            if over.is_empty() {
                format!("requests within {share} of the cluster")
            } else {
                format!("over the largest share of the cluster: {}", over.join(", "))
            },
            decided_by(req.resolutions, "maxClusterShare"),
        );
    }

    AdmissionResult { checks, charge }
}
