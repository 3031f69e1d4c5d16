//! A tenant's quota per resource pool (issue 19, seed 000 §4.4.1): beside
//! the tenant-wide limits, `quota.pools.<pool>` bounds what the tenant's
//! applications of that pool may request together.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn app(name: &str, pool: &str, cpu: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  \
         pool: {pool}\n  workloads:\n    - {{name: w, runtime: {{type: process}}, \
         resources: {{cpu: {{request: \"{cpu}\"}}, memory: {{request: 64Mi}}}}}}\n"
    )
}

#[test]
fn a_pool_quota_bounds_the_tenants_applications_of_that_pool_only() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}apiVersion: daros.io/v1\nkind: ResourcePool\nmetadata: {{name: fast}}\n\
             spec: {{selector: {{matchLabels: {{disk: nvme}}}}}}\n---\n{}",
            node_yaml("fast-1", "8", "16Gi", "disk: nvme", ""),
            node_yaml("slow-1", "8", "16Gi", "disk: hdd", ""),
            tenant_yaml(
                "acme",
                "quota: {cpu: \"6\", pools: {fast: {cpu: \"1\"}}}, pools: [default, fast]"
            )
        ),
        0,
    );
    apply(&mut c, &app("a", "fast", "600m"), 1);
    assert_ne!(c.phase(&key("acme", "a")), Some(Phase::Rejected));
    // A second one in the same pool would pass 1 cpu there: refused, saying so.
    apply(&mut c, &app("b", "fast", "600m"), 2);
    assert_eq!(c.phase(&key("acme", "b")), Some(Phase::Rejected));
    let reason = &c
        .list_apps(t(2))
        .into_iter()
        .find(|s| s.app == key("acme", "b"))
        .unwrap()
        .reason;
    assert!(
        reason.contains("quota.pools.cpu: cpu requests in pool fast 1200m with this one, quota 1"),
        "{reason}"
    );
    // The default pool is bound only by the tenant-wide quota.
    apply(&mut c, &app("c", "default", "600m"), 3);
    assert_ne!(c.phase(&key("acme", "c")), Some(Phase::Rejected));
    // Deleting the first frees its share of the pool.
    operate(&mut c, &key("acme", "a"), OperationRequest::Delete, 4).unwrap();
    apply(&mut c, &app("d", "fast", "600m"), 5);
    assert_ne!(c.phase(&key("acme", "d")), Some(Phase::Rejected));
}
