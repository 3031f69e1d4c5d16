//! Placement constraints (issue 19): a workload's `nodeSelector` is always
//! honoured, and when no node matches, the refusal says so with a count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn app(name: &str, selector: &str, replicas: u32) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         workloads:\n    - name: w\n      runtime: {{type: process}}\n      \
         resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}\n      \
         replicas: {replicas}\n      nodeSelector: {{{selector}}}\n"
    )
}

fn cluster() -> Coordinator {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}{}",
            node_yaml("fast-1", "64", "256Gi", "disk: nvme", ""),
            node_yaml("slow-1", "2", "4Gi", "disk: hdd", ""),
            node_yaml("slow-2", "2", "4Gi", "disk: hdd", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    c
}

#[test]
fn a_node_selector_is_always_honoured() {
    let mut c = cluster();
    // Bin-packing (the default) fills the small hdd nodes first...
    apply(&mut c, &app("web", "", 3), 1);
    let d = c.describe(&key("acme", "web"), t(1)).unwrap();
    assert!(
        d.instances
            .iter()
            .all(|i| i.node.as_deref() != Some("fast-1")),
        "{d:?}"
    );
    // ...but a selector for nvme sends every replica to the one nvme node.
    apply(&mut c, &app("db", "disk: nvme", 3), 2);
    let d = c.describe(&key("acme", "db"), t(2)).unwrap();
    assert_eq!(d.instances.len(), 3);
    for i in &d.instances {
        assert_eq!(i.node.as_deref(), Some("fast-1"), "{d:?}");
    }
}

#[test]
fn no_matching_node_is_refused_with_the_reason() {
    let mut c = cluster();
    apply(&mut c, &app("x", "disk: ssd", 1), 1);
    let reason = &c.list_apps(t(1))[0].reason;
    assert!(
        reason.contains("node labels do not match the workload's nodeSelector: 3"),
        "{reason}"
    );
    assert!(
        c.describe(&key("acme", "x"), t(1))
            .unwrap()
            .instances
            .iter()
            .all(|i| i.node.is_none())
    );
}

#[test]
fn bad_selectors_are_refused_with_their_path() {
    let e = daros_coordinator::spec::parse(&app("x", "\"bad key!\": v", 1), Format::Yaml)
        .map_err(|e| e.to_string())
        .and_then(|docs| {
            let mut c = cluster();
            c.apply(
                Command::Apply {
                    documents: docs,
                    start: true,
                },
                t(1),
            )
            .map_err(|e| e.to_string())
        })
        .unwrap_err();
    assert!(e.contains("spec.workloads[0].nodeSelector.bad key!"), "{e}");
}

/// Two workloads of one application, `web` and `cache`, with `extra` YAML
/// lines for each.
fn pair(name: &str, web: &str, cache: &str, web_replicas: u32, cache_replicas: u32) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         workloads:\n    - name: web\n      runtime: {{type: process}}\n      \
         resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}\n      replicas: {web_replicas}\n{web}\
         \n    - name: cache\n      runtime: {{type: process}}\n      \
         resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}\n      replicas: {cache_replicas}\n{cache}\n"
    )
}

fn nodes_of(c: &Coordinator, app: &str, workload: &str) -> Vec<String> {
    let d = c.describe(&key("acme", app), t(10)).unwrap();
    let mut v: Vec<String> = d
        .instances
        .iter()
        .filter(|i| i.id.to_string().split('/').nth(2) == Some(workload))
        .filter_map(|i| i.node.clone())
        .collect();
    v.sort();
    v
}

#[test]
fn colocated_workloads_share_nodes_and_anti_affine_replicas_spread() {
    let mut c = cluster();
    // One web per node (anti-affinity with itself: bin-packing alone would
    // put all three on one small node).
    apply(
        &mut c,
        &pair("shop", "      antiAffinity: [web]", "", 3, 1),
        1,
    );
    assert_eq!(
        nodes_of(&c, "shop", "web"),
        vec!["fast-1", "slow-1", "slow-2"],
        "one web per node"
    );
    // The cache goes where the web is, though bin-packing prefers the small
    // nodes and the cache has no selector of its own.
    apply(
        &mut c,
        &pair(
            "db",
            "      nodeSelector: {disk: nvme}",
            "      colocateWith: [web]",
            1,
            2,
        ),
        2,
    );
    assert_eq!(nodes_of(&c, "db", "web"), vec!["fast-1"]);
    assert_eq!(nodes_of(&c, "db", "cache"), vec!["fast-1", "fast-1"]);
    // A fourth anti-affine replica has nowhere to go: refused, with why.
    apply(
        &mut c,
        &pair("big", "      antiAffinity: [web]", "", 4, 1),
        3,
    );
    let reason = &c
        .list_apps(t(3))
        .into_iter()
        .find(|s| s.app == key("acme", "big"))
        .unwrap()
        .reason;
    assert!(
        reason.contains("node holds a workload of antiAffinity: 3"),
        "{reason}"
    );
}

#[test]
fn affinities_name_workloads_of_the_application_without_cycles() {
    for (web, cache, field) in [
        (
            "      colocateWith: [db]",
            "",
            "spec.workloads[0].colocateWith[0]: no workload \"db\"",
        ),
        (
            "      colocateWith: [cache]",
            "      colocateWith: [web]",
            "colocation cycle",
        ),
        (
            "      colocateWith: [cache]\n      antiAffinity: [cache]",
            "",
            "also in colocateWith",
        ),
    ] {
        let e = daros_coordinator::spec::parse(&pair("x", web, cache, 1, 1), Format::Yaml)
            .map_err(|e| e.to_string())
            .and_then(|docs| {
                cluster()
                    .apply(
                        Command::Apply {
                            documents: docs,
                            start: true,
                        },
                        t(1),
                    )
                    .map_err(|e| e.to_string())
            })
            .unwrap_err();
        assert!(e.contains(field), "{field}: {e}");
    }
}
