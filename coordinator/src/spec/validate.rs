//! Semantic validation of each kind, after its shape was read. Every error
//! carries the field path from the document root.

use super::envelope::{PolicySpec, ScopeLevel};
use crate::field::{FieldError, Violations, join};
use crate::model::application::{Application, MAX_PRIORITY};
use crate::model::dependency::DependencyGraph;
use crate::model::names::check_name;
use crate::model::node::ExecutionNode;
use crate::model::pool::ResourcePool;
use crate::model::ratio::Ratio;
use crate::model::tenant::Tenant;
use crate::model::workload::Workload;
use std::collections::BTreeSet;

/// Most replicas of one workload.
pub const MAX_REPLICAS: u32 = 10_000;

fn name(v: &mut Violations, path: &str, n: &str) {
    if let Some(e) = check_name(path, n) {
        v.extend([e]);
    }
}

/// Like [`name`], building the path `parent.key` only on error.
fn name_at(v: &mut Violations, parent: &str, key: &str, n: &str) {
    if let Some(mut e) = check_name("", n) {
        e.path = join(parent, key);
        v.extend([e]);
    }
}

/// Checks an application: names, priority, workloads (resources against
/// their QoS class, replicas, health checks, init jobs, dependencies and
/// cycles), lifecycle and policy rules.
pub fn application(app: &Application) -> Vec<FieldError> {
    let mut v = Violations::new();
    name(&mut v, "metadata.name", &app.name);
    name(&mut v, "metadata.tenant", &app.tenant);
    let s = &app.spec;
    if s.priority > MAX_PRIORITY {
        v.push(
            "spec.priority",
            format!("{} is above the maximum {MAX_PRIORITY}", s.priority),
        );
    }
    if let Some(p) = &s.pool {
        name(&mut v, "spec.pool", p);
    }
    if let Some(a) = s.sla.availability
        && a > Ratio::ONE
    {
        v.push("spec.sla.availability", format!("{a} is above 1 (100%)"));
    }
    v.extend(s.lifecycle_policy.validate("spec.lifecyclePolicy"));
    v.extend(s.policy.validate("spec.policy"));
    v.extend(s.policy.scope_errors(2, "spec.policy"));
    if s.workloads.is_empty() {
        v.push(
            "spec.workloads",
            "an application needs at least one workload",
        );
    }
    let mut seen = BTreeSet::new();
    for (i, w) in s.workloads.iter().enumerate() {
        let p = format!("spec.workloads[{i}]");
        if !seen.insert(w.name.as_str()) {
            v.push(
                join(&p, "name"),
                format!("duplicate workload name {:?}", w.name),
            );
        }
        workload(&mut v, app, w, &p);
        v.extend(w.security.validate(&join(&p, "security")));
        v.extend(crate::traits::validate(
            &w.traits,
            w.runtime.runtime_type,
            &join(&p, "traits"),
        ));
    }
    let names: BTreeSet<&str> = s.workloads.iter().map(|w| w.name.as_str()).collect();
    for (i, w) in s.workloads.iter().enumerate() {
        for (j, d) in w.depends_on.iter().enumerate() {
            let p = || format!("spec.workloads[{i}].dependsOn[{j}]");
            if d == &w.name {
                v.push(p(), "a workload cannot depend on itself");
            } else if !names.contains(d.as_str()) {
                v.push(p(), format!("no workload named {d:?} in this application"));
            }
        }
    }
    if let Some(cycle) = DependencyGraph::new(&s.workloads).find_cycle() {
        let first = s
            .workloads
            .iter()
            .position(|w| cycle.first() == Some(&w.name))
            .unwrap_or(0);
        v.push(
            format!("spec.workloads[{first}].dependsOn"),
            format!("dependency cycle: {}", cycle.join(" -> ")),
        );
    }
    if let Some(wf) = &s.workflow {
        v.extend(wf.validate(s, "spec.workflow"));
        let reserved = crate::state::workflow::WORKFLOW_JOBS;
        if let Some(i) = s.workloads.iter().position(|w| w.name == reserved) {
            v.push(
                format!("spec.workloads[{i}].name"),
                format!("{reserved:?} is taken by the workflow's job runs in an application with a workflow"),
            );
        }
    }
    v.errors().to_vec()
}

/// Whether following `colocateWith` from `w` comes back to `w`.
fn colocation_cycle(app: &Application, w: &Workload) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = w.colocate_with.iter().map(String::as_str).collect();
    while let Some(n) = todo.pop() {
        if n == w.name {
            return true;
        }
        if seen.insert(n)
            && let Some(x) = app.spec.workloads.iter().find(|x| x.name == n)
        {
            todo.extend(x.colocate_with.iter().map(String::as_str));
        }
    }
    false
}

fn workload(v: &mut Violations, app: &Application, w: &Workload, p: &str) {
    name_at(v, p, "name", &w.name);
    if let Some(img) = &w.image
        && img.trim().is_empty()
    {
        v.push(join(p, "image"), "must not be empty when given");
    }
    let rp = join(p, "resources");
    v.extend(w.resources.validate(&rp));
    let class = app.qos_of(w);
    let mut qerrs = class.validate(&w.resources, &rp);
    if w.qos.is_none() && app.spec.qos.is_none() {
        for e in &mut qerrs {
            e.reason = format!(
                "{} (class {class} inferred from the resources; set qos to choose)",
                e.reason
            );
        }
    }
    v.extend(qerrs);
    if w.replicas.min == 0 {
        v.push(join(p, "replicas.min"), "must be at least 1");
    }
    if w.replicas.max < w.replicas.min {
        v.push(
            join(p, "replicas.max"),
            format!("max {} is below min {}", w.replicas.max, w.replicas.min),
        );
    }
    if w.replicas.max > MAX_REPLICAS {
        v.push(
            join(p, "replicas.max"),
            format!("above the maximum {MAX_REPLICAS}"),
        );
    }
    if let Some(l) = &w.lifecycle {
        v.extend(l.validate(&join(p, "lifecycle")));
    }
    let names: BTreeSet<&str> = app.spec.workloads.iter().map(|x| x.name.as_str()).collect();
    for (field, list) in [
        ("colocateWith", &w.colocate_with),
        ("antiAffinity", &w.anti_affinity),
    ] {
        for (i, t) in list.iter().enumerate() {
            if !names.contains(t.as_str()) {
                v.push(
                    format!("{p}.{field}[{i}]"),
                    format!("no workload {t:?} in this application"),
                );
            }
        }
    }
    if w.colocate_with.contains(&w.name) {
        v.push(
            format!("{p}.colocateWith"),
            "a workload cannot be colocated with itself",
        );
    }
    if let Some(t) = w.colocate_with.iter().find(|t| w.anti_affinity.contains(t)) {
        v.push(
            format!("{p}.antiAffinity"),
            format!("{t:?} is also in colocateWith: no node can satisfy both"),
        );
    }
    if !w.colocate_with.contains(&w.name) && colocation_cycle(app, w) {
        v.push(
            format!("{p}.colocateWith"),
            "colocation cycle: workloads colocated with each other in a ring (colocate them all with one of them)",
        );
    }
    for (k, val) in &w.node_selector {
        let bad = |s: &str| {
            s.len() > 253
                || !s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        };
        if k.is_empty() || bad(k) || bad(val) {
            v.push(
                format!("{p}.nodeSelector.{k}"),
                "label keys and values are letters, digits, '-', '_', '.' and '/' (keys non-empty, at most 253)",
            );
        }
    }
    let mut checks = BTreeSet::new();
    for (i, h) in w.health_checks.iter().enumerate() {
        let hp = format!("{p}.healthChecks[{i}]");
        if !checks.insert(h.name.as_str()) {
            v.push(
                join(&hp, "name"),
                format!("duplicate health check name {:?}", h.name),
            );
        }
        v.extend(h.validate(&hp));
    }
    let mut jobs = BTreeSet::new();
    let all = w.all_init_jobs();
    for (at, j) in &all {
        let jp = format!("{p}.{at}");
        name_at(v, &jp, "name", &j.name);
        if !jobs.insert(j.name.clone()) {
            v.push(
                join(&jp, "name"),
                format!("duplicate init job name {:?}", j.name),
            );
        }
        v.extend(j.resources.validate(&join(&jp, "resources")));
        v.extend(j.backoff.validate(&join(&jp, "backoff")));
        if let Some(r) = j.runtime
            && r.os != w.runtime.os
        {
            v.push(
                join(&jp, "runtime.os"),
                format!("runs on the workload's node, which is {}", w.runtime.os),
            );
        }
        if j.timeout.is_some_and(|t| t.0 == 0) {
            v.push(join(&jp, "timeout"), "must be greater than 0");
        }
    }
}

/// Checks a tenant.
pub fn tenant(t: &Tenant) -> Vec<FieldError> {
    let mut v = Violations::new();
    name(&mut v, "metadata.name", &t.name);
    if t.quota.priority_ceiling > MAX_PRIORITY {
        v.push(
            "spec.quota.priorityCeiling",
            format!(
                "{} is above the maximum {MAX_PRIORITY}",
                t.quota.priority_ceiling
            ),
        );
    }
    for (i, p) in t.pools.iter().enumerate() {
        name(&mut v, &format!("spec.pools[{i}]"), p);
    }
    v.extend(t.policy.validate("spec.policy"));
    v.extend(t.policy.scope_errors(1, "spec.policy"));
    for (i, ns) in t.namespaces.iter().enumerate() {
        name(&mut v, &format!("spec.namespaces[{i}]"), ns);
    }
    v.errors().to_vec()
}

/// Checks a policy document's scope and rules.
pub fn policy(doc_name: &str, p: &PolicySpec) -> Vec<FieldError> {
    let mut v = Violations::new();
    name(&mut v, "metadata.name", doc_name);
    match p.scope {
        ScopeLevel::Global => {
            if p.tenant.is_some() {
                v.push("spec.tenant", "a Global policy names no tenant");
            }
            if p.application.is_some() {
                v.push("spec.application", "a Global policy names no application");
            }
        }
        ScopeLevel::Tenant => {
            match &p.tenant {
                Some(t) => name(&mut v, "spec.tenant", t),
                None => v.push("spec.tenant", "a Tenant policy must name its tenant"),
            }
            if p.application.is_some() {
                v.push("spec.application", "a Tenant policy names no application");
            }
        }
        ScopeLevel::Application => {
            match &p.tenant {
                Some(t) => name(&mut v, "spec.tenant", t),
                None => v.push("spec.tenant", "an Application policy must name the tenant"),
            }
            match &p.application {
                Some(a) => name(&mut v, "spec.application", a),
                None => v.push(
                    "spec.application",
                    "an Application policy must name the application",
                ),
            }
        }
    }
    v.extend(p.rules.validate("spec.rules"));
    let level = match p.scope {
        ScopeLevel::Global => 0,
        ScopeLevel::Tenant => 1,
        ScopeLevel::Application => 2,
    };
    v.extend(p.rules.scope_errors(level, "spec.rules"));
    v.errors().to_vec()
}

/// Checks a pool.
pub fn pool(p: &ResourcePool) -> Vec<FieldError> {
    let mut v = Violations::new();
    name(&mut v, "metadata.name", &p.name);
    v.extend(p.selector.validate("spec.selector"));
    v.errors().to_vec()
}

/// Checks a node document (paths from the document root).
pub fn node(n: &ExecutionNode) -> Vec<FieldError> {
    n.validate("")
        .into_iter()
        .map(|mut e| {
            e.path = if e.path == "name" {
                "metadata.name".into()
            } else {
                format!("spec.{}", e.path)
            };
            e
        })
        .collect()
}

/// Most keys of one Config or Secret.
const MAX_OBJECT_KEYS: usize = 256;
/// Largest value.
const MAX_OBJECT_VALUE: usize = 64 * 1024;

fn object_keys<'a>(
    v: &mut Violations,
    name_: &str,
    tenant: &str,
    data: impl ExactSizeIterator<Item = (&'a String, usize)>,
) {
    name(v, "metadata.name", name_);
    name(v, "metadata.tenant", tenant);
    if data.len() == 0 {
        v.push("spec.data", "needs at least one key");
    }
    if data.len() > MAX_OBJECT_KEYS {
        v.push(
            "spec.data",
            format!("{} keys; at most {MAX_OBJECT_KEYS}", data.len()),
        );
    }
    for (k, len) in data {
        if let Err(reason) = crate::traits::env::check_key(k) {
            v.push(format!("spec.data.{k}"), reason);
        }
        if len > MAX_OBJECT_VALUE {
            v.push(
                format!("spec.data.{k}"),
                format!("{len} bytes; at most {MAX_OBJECT_VALUE}"),
            );
        }
    }
}

/// Checks a Config.
pub fn config(c: &crate::model::config::Config) -> Vec<FieldError> {
    let mut v = Violations::new();
    object_keys(
        &mut v,
        &c.name,
        &c.tenant,
        c.data.iter().map(|(k, x)| (k, x.len())),
    );
    v.errors().to_vec()
}

/// Checks a Secret (plain or sealed values).
pub fn secret(s: &crate::model::secret::Secret) -> Vec<FieldError> {
    use crate::model::secret::SecretValue;
    let mut v = Violations::new();
    object_keys(
        &mut v,
        &s.name,
        &s.tenant,
        s.data.iter().map(|(k, x)| {
            (
                k,
                match x {
                    SecretValue::Plain(t) => t.expose().len(),
                    SecretValue::Sealed(_) => 0,
                },
            )
        }),
    );
    v.errors().to_vec()
}
