//! Resolution of the security baseline across scopes, the admission checks
//! of a workload's request against it, and the context each adapter
//! enforces. Merge rule: the tighter value wins — a permission (`allow*`)
//! is off when any scope says false; a requirement (`runAsNonRoot`,
//! `noNewPrivileges`, `readOnlyRoot`, seccomp RuntimeDefault) is on when any
//! scope asks for it; lists (`allowedUsers`, `allowedCapabilities`,
//! `allowedWritablePaths`) intersect.

use super::resolve::ScopedPolicy;
use crate::model::security::{
    Capability, SeccompProfile, SecurityContext, SecurityRules, WorkloadSecurity, is_root,
};
use crate::model::workload::Workload;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The resolved baseline, with the policy (and scope) behind each rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityBaseline {
    /// Privileged workloads allowed.
    pub allow_privileged: bool,
    /// Root is refused.
    pub run_as_non_root: bool,
    /// Users allowed (`None`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_users: Option<BTreeSet<String>>,
    /// Groups allowed (`None`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_groups: Option<BTreeSet<String>>,
    /// Capabilities a workload may add.
    pub allowed_capabilities: BTreeSet<Capability>,
    /// `no_new_privs` on every process.
    pub no_new_privileges: bool,
    /// The filter.
    pub seccomp: SeccompProfile,
    /// Read-only filesystem but the workload's `writablePaths`.
    pub read_only_root: bool,
    /// Prefixes writable paths must be under (every list applies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_writable_paths: Vec<Vec<String>>,
    /// Host namespaces allowed.
    pub allow_host_namespaces: bool,
    /// hostPath volumes allowed.
    pub allow_host_paths: bool,
    /// Rule name → `policy NAME (SCOPE)` that decided it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decided_by: BTreeMap<String, String>,
}

impl Default for SecurityBaseline {
    fn default() -> Self {
        Self {
            allow_privileged: false,
            run_as_non_root: false,
            allowed_users: None,
            allowed_groups: None,
            allowed_capabilities: BTreeSet::new(),
            no_new_privileges: true,
            seccomp: SeccompProfile::RuntimeDefault,
            read_only_root: false,
            allowed_writable_paths: Vec::new(),
            allow_host_namespaces: true,
            allow_host_paths: true,
            decided_by: BTreeMap::new(),
        }
    }
}

/// Resolves the `security` rules of `ps` (sorted by scope already).
pub fn resolve_security(ps: &[&ScopedPolicy<'_>]) -> SecurityBaseline {
    let mut b = SecurityBaseline::default();
    let set: Vec<(&ScopedPolicy<'_>, &SecurityRules)> = ps
        .iter()
        .filter_map(|p| p.rules.security.as_ref().map(|s| (*p, s)))
        .collect();
    let by = |p: &ScopedPolicy<'_>| format!("policy {} ({})", p.name, p.scope);
    // A permission: off when any scope says false; on only when one says
    // true and none says false.
    let flag = |name: &str,
                get: fn(&SecurityRules) -> Option<bool>,
                tight: bool,
                default: bool,
                out: &mut bool,
                decided: &mut BTreeMap<String, String>| {
        let asked: Vec<(&ScopedPolicy<'_>, bool)> = set
            .iter()
            .filter_map(|(p, s)| get(s).map(|v| (*p, v)))
            .collect();
        *out = default;
        if let Some((p, v)) = asked.iter().find(|(_, v)| *v == tight).or(asked.first()) {
            *out = *v;
            decided.insert(name.to_string(), by(p));
        }
    };
    let mut decided = BTreeMap::new();
    flag(
        "allowPrivileged",
        |s| s.allow_privileged,
        false,
        false,
        &mut b.allow_privileged,
        &mut decided,
    );
    flag(
        "runAsNonRoot",
        |s| s.run_as_non_root,
        true,
        false,
        &mut b.run_as_non_root,
        &mut decided,
    );
    flag(
        "noNewPrivileges",
        |s| s.no_new_privileges,
        true,
        true,
        &mut b.no_new_privileges,
        &mut decided,
    );
    flag(
        "readOnlyRoot",
        |s| s.read_only_root,
        true,
        false,
        &mut b.read_only_root,
        &mut decided,
    );
    flag(
        "allowHostNamespaces",
        |s| s.allow_host_namespaces,
        false,
        true,
        &mut b.allow_host_namespaces,
        &mut decided,
    );
    flag(
        "allowHostPaths",
        |s| s.allow_host_paths,
        false,
        true,
        &mut b.allow_host_paths,
        &mut decided,
    );
    let mut unconfined = false;
    flag(
        "seccompProfile",
        |s| s.seccomp_profile.map(|p| p == SeccompProfile::Unconfined),
        false,
        false,
        &mut unconfined,
        &mut decided,
    );
    b.seccomp = if unconfined {
        SeccompProfile::Unconfined
    } else {
        SeccompProfile::RuntimeDefault
    };
    for (p, s) in &set {
        if let Some(users) = &s.allowed_users {
            let list: BTreeSet<String> = users.iter().cloned().collect();
            b.allowed_users = Some(match b.allowed_users.take() {
                None => list,
                Some(cur) => cur.intersection(&list).cloned().collect(),
            });
            decided
                .entry("allowedUsers".into())
                .and_modify(|d: &mut String| d.push_str(&format!(" + {}", by(p))))
                .or_insert_with(|| by(p));
        }
        if let Some(groups) = &s.allowed_groups {
            let list: BTreeSet<String> = groups.iter().cloned().collect();
            b.allowed_groups = Some(match b.allowed_groups.take() {
                None => list,
                Some(cur) => cur.intersection(&list).cloned().collect(),
            });
            decided
                .entry("allowedGroups".into())
                .and_modify(|d: &mut String| d.push_str(&format!(" + {}", by(p))))
                .or_insert_with(|| by(p));
        }
        if let Some(caps) = &s.allowed_capabilities {
            let list: BTreeSet<Capability> = caps.iter().cloned().collect();
            b.allowed_capabilities = if decided.contains_key("allowedCapabilities") {
                b.allowed_capabilities
                    .intersection(&list)
                    .cloned()
                    .collect()
            } else {
                list
            };
            decided
                .entry("allowedCapabilities".into())
                .and_modify(|d: &mut String| d.push_str(&format!(" + {}", by(p))))
                .or_insert_with(|| by(p));
        }
        if let Some(paths) = &s.allowed_writable_paths {
            b.allowed_writable_paths.push(paths.clone());
            decided
                .entry("allowedWritablePaths".into())
                .and_modify(|d: &mut String| d.push_str(&format!(" + {}", by(p))))
                .or_insert_with(|| by(p));
        }
    }
    b.decided_by = decided;
    b
}

/// One failed rule of a workload: (rule, what is wrong).
pub type Violation = (String, String);

/// The user a workload runs as, as far as the coordinator can tell: its
/// `security.runAsUser`, else a process workload's `runtimeSpec.user`, else
/// a pod template's `securityContext.runAsUser`; `None`: the runtime's
/// default (root for the process runtime, the image's for a pod).
pub fn requested_user(w: &Workload) -> Option<String> {
    if let Some(u) = &w.security.run_as_user {
        return Some(u.clone());
    }
    let spec = w.runtime_spec.value();
    let as_string = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    spec.get("user").and_then(as_string).or_else(|| {
        pod_spec(w).and_then(|p| {
            p.get("securityContext")?
                .get("runAsUser")
                .and_then(as_string)
        })
    })
}

/// The group a workload runs as, as far as the coordinator can tell (like
/// [`requested_user`]); `None`: its user's primary group.
pub fn requested_group(w: &Workload) -> Option<String> {
    if let Some(g) = &w.security.run_as_group {
        return Some(g.clone());
    }
    let as_string = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    w.runtime_spec
        .value()
        .get("group")
        .and_then(as_string)
        .or_else(|| {
            pod_spec(w).and_then(|p| {
                p.get("securityContext")?
                    .get("runAsGroup")
                    .and_then(as_string)
            })
        })
}

fn pod_spec(w: &Workload) -> Option<&serde_json::Value> {
    w.runtime_spec.value().get("podTemplate")?.get("spec")
}

/// Every container of a pod template: (path, container).
fn containers(w: &Workload) -> Vec<(String, &serde_json::Value)> {
    let Some(spec) = pod_spec(w) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for kind in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(list) = spec.get(kind).and_then(|l| l.as_array()) {
            for (i, c) in list.iter().enumerate() {
                v.push((format!("{kind}[{i}]"), c));
            }
        }
    }
    v
}

/// The images of every container of a pod template (sidecars and init
/// containers included), with where they are.
pub fn pod_images(w: &Workload) -> Vec<(String, Option<String>)> {
    containers(w)
        .into_iter()
        .map(|(at, c)| {
            (
                at,
                c.get("image").and_then(|i| i.as_str()).map(str::to_string),
            )
        })
        .collect()
}

/// Whether `p` lies under prefix `prefix` (a path component boundary).
fn under(p: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty() || p == prefix || p.starts_with(&format!("{prefix}/"))
}

/// Checks workload `w` (a process or a pod) against `b`; `namespaces` are
/// the tenant's Kubernetes namespaces.
pub fn check_workload(w: &Workload, b: &SecurityBaseline, namespaces: &[String]) -> Vec<Violation> {
    let mut v: Vec<Violation> = Vec::new();
    let s = &w.security;
    let process = w.runtime.runtime_type == crate::model::runtime::RuntimeType::Process;
    let privileged = s.privileged
        || containers(w).iter().any(|(_, c)| {
            c.get("securityContext")
                .and_then(|sc| sc.get("privileged"))
                .and_then(|p| p.as_bool())
                == Some(true)
        });
    if privileged && !b.allow_privileged {
        v.push((
            "security.allowPrivileged".into(),
            "privileged workloads are not allowed".into(),
        ));
    }
    let user = requested_user(w);
    if let (Some(a), Some(b)) = (
        &s.run_as_user,
        w.runtime_spec.value().get("user").and_then(|u| u.as_str()),
    ) && process
        && a != b
    {
        v.push((
            "security.runAsUser".into(),
            format!("security.runAsUser {a} and runtimeSpec.user {b} disagree"),
        ));
    }
    if b.run_as_non_root {
        match (&user, process) {
            (Some(u), _) if is_root(u) => {
                v.push(("security.runAsNonRoot".into(), format!("it runs as {u}")))
            }
            (None, true) => v.push((
                "security.runAsNonRoot".into(),
                "it names no user and would run as the agent's user (root); set security.runAsUser"
                    .into(),
            )),
            _ => {}
        }
    }
    if let Some(allowed) = &b.allowed_users {
        let u = user.clone().unwrap_or_else(|| "root".into());
        if !allowed.contains(&u) {
            v.push((
                "security.allowedUsers".into(),
                format!(
                    "it runs as {u}; allowed: [{}]",
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    if let Some(allowed) = &b.allowed_groups {
        match requested_group(w) {
            Some(g) if allowed.contains(&g) => {}
            g => v.push((
                "security.allowedGroups".into(),
                format!(
                    "it runs as group {}; allowed: [{}]",
                    g.unwrap_or_else(
                        || "(its user's primary group; set security.runAsGroup)".into()
                    ),
                    allowed.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            )),
        }
    }
    let extra: Vec<String> = s
        .add_capabilities
        .iter()
        .filter(|c| !b.allowed_capabilities.contains(*c))
        .map(|c| c.to_string())
        .collect();
    let privileged_ok = privileged && b.allow_privileged;
    if !extra.is_empty() && !privileged_ok {
        v.push((
            "security.allowedCapabilities".into(),
            format!(
                "it adds [{}]; allowed: [{}]",
                extra.join(", "),
                b.allowed_capabilities
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if s.seccomp_profile == Some(SeccompProfile::Unconfined)
        && b.seccomp == SeccompProfile::RuntimeDefault
    {
        v.push((
            "security.seccompProfile".into(),
            "it asks for no system-call filter; policies require RuntimeDefault".into(),
        ));
    }
    for p in &s.writable_paths {
        for list in &b.allowed_writable_paths {
            if !list.iter().any(|pre| under(p, pre)) {
                v.push((
                    "security.allowedWritablePaths".into(),
                    format!("{p} is not under [{}]", list.join(", ")),
                ));
            }
        }
    }
    if !b.allow_host_namespaces {
        if process {
            v.push((
                "security.allowHostNamespaces".into(),
                "the process runtime runs in the host's network and PID namespaces".into(),
            ));
        }
        if let Some(spec) = pod_spec(w) {
            for f in ["hostNetwork", "hostPID", "hostIPC"] {
                if spec.get(f).and_then(|x| x.as_bool()) == Some(true) {
                    v.push((
                        "security.allowHostNamespaces".into(),
                        format!("runtimeSpec.podTemplate.spec.{f} is true"),
                    ));
                }
            }
        }
    }
    if !b.allow_host_paths
        && let Some(vols) = pod_spec(w)
            .and_then(|s| s.get("volumes"))
            .and_then(|v| v.as_array())
    {
        for (i, vol) in vols.iter().enumerate() {
            if vol.get("hostPath").is_some() {
                v.push((
                    "security.allowHostPaths".into(),
                    format!("runtimeSpec.podTemplate.spec.volumes[{i}] is a hostPath"),
                ));
            }
        }
    }
    if w.runtime.runtime_type == crate::model::runtime::RuntimeType::Container
        && let Some(ns) = w
            .runtime_spec
            .value()
            .get("namespace")
            .and_then(|n| n.as_str())
        && !namespaces.iter().any(|o| o == ns)
    {
        v.push((
            "tenant.namespaces".into(),
            format!(
                "runtimeSpec.namespace {ns} is not one of the tenant's namespaces [{}]",
                namespaces.join(", ")
            ),
        ));
    }
    v
}

/// What the adapter enforces for workload security `s` under `b`.
pub fn context_of(s: &WorkloadSecurity, b: &SecurityBaseline) -> SecurityContext {
    let privileged = s.privileged && b.allow_privileged;
    let mut caps: BTreeSet<Capability> = if s.drop_all_capabilities {
        BTreeSet::new()
    } else {
        Capability::defaults().into_iter().collect()
    };
    for c in &s.drop_capabilities {
        caps.remove(c);
    }
    caps.extend(s.add_capabilities.iter().cloned());
    let read_only = b.read_only_root || s.read_only_root;
    SecurityContext {
        privileged,
        run_as_user: s.run_as_user.clone(),
        run_as_group: s.run_as_group.clone(),
        run_as_non_root: b.run_as_non_root,
        capabilities: caps.into_iter().collect(),
        no_new_privileges: b.no_new_privileges && !privileged,
        seccomp: if privileged {
            SeccompProfile::Unconfined
        } else {
            s.seccomp_profile
                .filter(|_| b.seccomp == SeccompProfile::Unconfined)
                .unwrap_or(SeccompProfile::RuntimeDefault)
        },
        writable_paths: read_only.then(|| s.writable_paths.clone()),
    }
}
