//! The runtime security baseline at admission (issue 21): a request the
//! policies forbid is refused naming the rule and the policy with its scope;
//! every container of a pod is checked, not just the first; a tenant's pods
//! run only in its namespaces; what is admitted carries the context every
//! adapter enforces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::reconcile::ActionKind;
use daros_coordinator::*;

fn cluster(rules: &str) -> Coordinator {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: baseline}}\n\
             spec: {{scope: Global, rules: {{{rules}}}}}\n---\n",
            node_yaml("n1", "4", "8Gi", "", ""),
            tenant_yaml("acme", ""),
            tenant_yaml("other", ""),
        ),
        0,
    );
    c
}

fn process_app(name: &str, workload_extra: &str, runtime_spec: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         workloads:\n    - name: web\n      runtime: {{type: process}}\n      \
         resources: {{cpu: {{request: 100m}}}}\n{workload_extra}      runtimeSpec: {runtime_spec}\n"
    )
}

fn pod_app(name: &str, runtime_spec: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         workloads:\n    - name: web\n      runtime: {{type: container}}\n      image: registry.example.com/web:1\n      \
         resources: {{cpu: {{request: 100m}}}}\n      runtimeSpec: {runtime_spec}\n"
    )
}

/// The failed checks of `name`'s admission, as "rule: detail".
fn refused(c: &Coordinator, name: &str) -> Vec<String> {
    let k = key("acme", name);
    assert_eq!(c.phase(&k), Some(Phase::Rejected), "{name} admitted");
    let x = c.explain(c.latest_decision(&k).unwrap()).unwrap();
    x.checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| format!("{}: {}", c.rule, c.detail))
        .collect()
}

#[test]
fn root_is_refused_under_run_as_non_root_naming_rule_and_policy() {
    let mut c = cluster("security: {runAsNonRoot: true}");
    apply(
        &mut c,
        &process_app(
            "root",
            "",
            "{command: /bin/sleep, args: [\"9\"], user: root}",
        ),
        1,
    );
    assert_eq!(
        refused(&c, "root"),
        [
            "security.runAsNonRoot: workload web: it runs as root (forbidden by policy baseline (global))"
        ]
    );
    apply(
        &mut c,
        &process_app("nouser", "", "{command: /bin/sleep}"),
        2,
    );
    assert!(
        refused(&c, "nouser")[0].contains("names no user and would run as the agent's user (root)"),
        "{:?}",
        refused(&c, "nouser")
    );
    // As nobody: admitted.
    let out = apply(
        &mut c,
        &process_app(
            "ok",
            "      security: {runAsUser: nobody}\n",
            "{command: /bin/sleep}",
        ),
        3,
    );
    assert_ne!(
        c.phase(&key("acme", "ok")),
        Some(Phase::Rejected),
        "{out:?}"
    );
}

#[test]
fn privileges_capabilities_filter_and_host_namespaces_are_policy_bound() {
    let mut c = cluster("security: {allowedCapabilities: [NET_BIND_SERVICE]}");
    apply(
        &mut c,
        &process_app(
            "priv",
            "      security: {privileged: true}\n",
            "{command: /bin/sleep}",
        ),
        1,
    );
    assert_eq!(
        refused(&c, "priv"),
        [
            "security.allowPrivileged: workload web: privileged workloads are not allowed (forbidden by the default baseline)"
        ]
    );
    apply(
        &mut c,
        &process_app(
            "caps",
            "      security: {addCapabilities: [NET_ADMIN, NET_BIND_SERVICE]}\n",
            "{command: /bin/sleep}",
        ),
        2,
    );
    assert_eq!(
        refused(&c, "caps"),
        [
            "security.allowedCapabilities: workload web: it adds [NET_ADMIN]; allowed: [NET_BIND_SERVICE] (forbidden by policy baseline (global))"
        ]
    );
    apply(
        &mut c,
        &process_app(
            "nofilter",
            "      security: {seccompProfile: Unconfined}\n",
            "{command: /bin/sleep}",
        ),
        3,
    );
    assert!(refused(&c, "nofilter")[0].starts_with("security.seccompProfile"));

    let mut c = cluster("security: {allowHostNamespaces: false}");
    apply(&mut c, &process_app("proc", "", "{command: /bin/sleep}"), 1);
    assert_eq!(
        refused(&c, "proc"),
        [
            "security.allowHostNamespaces: workload web: the process runtime runs in the host's network and PID namespaces (forbidden by policy baseline (global))"
        ]
    );
    apply(
        &mut c,
        &pod_app(
            "hostnet",
            "{namespace: acme, podTemplate: {spec: {hostNetwork: true, containers: [{name: web, image: registry.example.com/web:1}]}}}",
        ),
        2,
    );
    assert!(refused(&c, "hostnet")[0].contains("runtimeSpec.podTemplate.spec.hostNetwork is true"));
}

#[test]
fn every_container_image_and_the_namespace_are_checked() {
    let mut c = cluster("allowedImages: [\"registry.example.com/*\"]");
    apply(
        &mut c,
        &pod_app(
            "sidecar",
            "{namespace: acme, podTemplate: {spec: {initContainers: [{name: setup, image: docker.io/busybox}], \
             containers: [{name: web, image: registry.example.com/web:1}, {name: proxy, image: evil.example.org/proxy}]}}}",
        ),
        1,
    );
    let r = refused(&c, "sidecar").join("\n");
    assert!(
        r.contains("web/initContainers[0] (docker.io/busybox)"),
        "{r}"
    );
    assert!(
        r.contains("web/containers[1] (evil.example.org/proxy)"),
        "{r}"
    );
    assert!(!r.contains("containers[0] (registry"), "{r}");
    apply(
        &mut c,
        &pod_app(
            "elsewhere",
            "{namespace: other, podTemplate: {spec: {containers: [{name: web, image: registry.example.com/web:1}]}}}",
        ),
        2,
    );
    assert_eq!(
        refused(&c, "elsewhere"),
        [
            "tenant.namespaces: workload web: runtimeSpec.namespace other is not one of the tenant's namespaces [acme]"
        ]
    );
    // Its own namespace, or none (then the tenant's is given to the adapter).
    let out = apply(
        &mut c,
        &pod_app(
            "mine",
            "{podTemplate: {spec: {containers: [{name: web, image: registry.example.com/web:1}]}}}",
        ),
        3,
    );
    let launch = out
        .actions
        .iter()
        .find_map(|a| match &a.kind {
            ActionKind::Start { launch, .. } => Some(launch.clone()),
            _ => None,
        })
        .expect("started");
    assert_eq!(launch.namespace.as_deref(), Some("acme"));
}

#[test]
fn the_launch_carries_what_the_adapter_enforces() {
    let mut c = cluster(
        "security: {readOnlyRoot: true, allowedCapabilities: [NET_BIND_SERVICE], allowedWritablePaths: [/tmp, /var/lib/app]}",
    );
    let out = apply(
        &mut c,
        &process_app(
            "ok",
            "      security: {runAsUser: nobody, dropAllCapabilities: true, addCapabilities: [NET_BIND_SERVICE], writablePaths: [/tmp/web]}\n",
            "{command: /bin/sleep}",
        ),
        1,
    );
    let launch = out
        .actions
        .iter()
        .find_map(|a| match &a.kind {
            ActionKind::Start { launch, .. } => Some(launch.clone()),
            _ => None,
        })
        .expect("started");
    let s = &launch.security;
    assert_eq!(s.run_as_user.as_deref(), Some("nobody"));
    assert_eq!(
        s.capabilities.iter().map(|c| c.name()).collect::<Vec<_>>(),
        ["NET_BIND_SERVICE"]
    );
    assert!(s.no_new_privileges);
    assert_eq!(s.seccomp, model::security::SeccompProfile::RuntimeDefault);
    assert_eq!(
        s.writable_paths.as_deref(),
        Some(&["/tmp/web".to_string()][..])
    );
    // A writable path outside the allowed ones is refused.
    apply(
        &mut c,
        &process_app(
            "etc",
            "      security: {runAsUser: nobody, writablePaths: [/etc]}\n",
            "{command: /bin/sleep}",
        ),
        2,
    );
    assert!(refused(&c, "etc")[0].contains("/etc is not under [/tmp, /var/lib/app]"));
}

#[test]
fn bad_input_names_the_field() {
    let e = daros_coordinator::spec::parse(
        &process_app(
            "x",
            "      security: {addCapabilities: [CAP_FLY]}\n",
            "{command: /bin/sleep}",
        ),
        Format::Yaml,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("spec.workloads[0].security.addCapabilities"),
        "{e}"
    );
    assert!(e.contains("unknown capability \"CAP_FLY\""), "{e}");
    let e = daros_coordinator::spec::parse(
        &process_app(
            "x",
            "      security: {writablePaths: [tmp]}\n",
            "{command: /bin/sleep}",
        ),
        Format::Yaml,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("spec.workloads[0].security.writablePaths[0]"),
        "{e}"
    );
    let e = daros_coordinator::spec::parse(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: p}\n\
         spec: {scope: Global, rules: {security: {allowedUsers: []}}}\n",
        Format::Yaml,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("spec.rules.security.allowedUsers"), "{e}");
}

#[test]
fn groups_are_policy_bound_too() {
    let mut c = cluster("security: {allowedGroups: [nogroup]}");
    apply(
        &mut c,
        &process_app(
            "g",
            "      security: {runAsUser: nobody}\n",
            "{command: /bin/sleep, group: root}",
        ),
        1,
    );
    assert_eq!(
        refused(&c, "g"),
        [
            "security.allowedGroups: workload web: it runs as group root; allowed: [nogroup] (forbidden by policy baseline (global))"
        ]
    );
    let out = apply(
        &mut c,
        &process_app(
            "ok",
            "      security: {runAsUser: nobody, runAsGroup: nogroup}\n",
            "{command: /bin/sleep}",
        ),
        2,
    );
    assert_ne!(
        c.phase(&key("acme", "ok")),
        Some(Phase::Rejected),
        "{out:?}"
    );
}

#[test]
fn a_sidecar_image_is_checked_like_the_workload_s() {
    let mut c = cluster("allowedImages: [\"/usr/bin/*\"]");
    apply(
        &mut c,
        &process_app(
            "shipper",
            "      image: /usr/bin/sleep\n      traits:\n      - type: sidecar\n        properties: {sidecars: [{name: ship, image: /opt/evil/ship, runtimeSpec: {command: /opt/evil/ship}}]}\n",
            "{command: /usr/bin/sleep}",
        ),
        1,
    );
    let r = refused(&c, "shipper").join("\n");
    assert!(r.contains("web/sidecar/ship (/opt/evil/ship)"), "{r}");
    assert!(!r.contains("(/usr/bin/sleep)"), "{r}");
}

#[test]
fn a_workflow_job_s_program_is_checked_like_a_workload_image() {
    let mut c = cluster("allowedImages: [\"/usr/bin/*\"]");
    let app = process_app(
        "flow",
        "      image: /usr/bin/sleep\n",
        "{command: /usr/bin/sleep}",
    ) + "  workflow:\n    steps:\n    \
           - {name: fetch, type: command, properties: {command: /opt/evil/fetch}}\n    \
           - {name: ok, type: command, properties: {command: /usr/bin/true}}\n    \
           - {name: all, type: deploy, dependsOn: [fetch, ok], properties: {workloads: [web]}}\n";
    apply(&mut c, &app, 1);
    let r = refused(&c, "flow").join("\n");
    assert!(r.contains("workflow/fetch (/opt/evil/fetch)"), "{r}");
    assert!(!r.contains("workflow/ok"), "{r}");
}
