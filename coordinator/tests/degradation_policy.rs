//! The seed's GlobalDegradationPolicy and FairShareWithinTenant (issue 19,
//! seed 000 §8.2): the platform may evict applications that lost capacity
//! (at once, or once degraded for `evictAfter`) through the `Evicted` edge;
//! a tenant may make preemption among its own applications fair (only an
//! application above its equal part of the tenant's holding is taken).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

/// One 4-cpu node, tenant `a` (with tenant-scope `tenant_rules`), and a Global
/// policy with `rules`.
fn cluster(rules: &str, tenant_rules: &str) -> Coordinator {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: platform}}\n\
             spec: {{scope: Global, rules: {{{rules}}}}}\n---\n",
            node_yaml("n1", "4", "16Gi", "", ""),
            tenant_yaml("a", &format!("policy: {{{tenant_rules}}}")),
        ),
        0,
    );
    c
}

fn app(name: &str, priority: u32, cpu: &str, n: u32) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: a}}\nspec:\n  \
         priority: {priority}\n  workloads:\n    - name: w\n      \
         runtime: {{type: process}}\n      resources: {{cpu: {{request: \"{cpu}\"}}, memory: {{request: 64Mi}}}}\n      \
         replicas: {n}\n"
    )
}

fn run(c: &mut Coordinator, out: &Outcome, now: u64) {
    for id in started(out) {
        report(c, &id, ObservedState::Running, now);
    }
}

/// `small` (priority 10, 1 of 8 replicas' worth) and `big` (priority 20,
/// 3.5 cpu) fill the node; `urgent` (priority 500) needs 0.5 cpu. Returns
/// which application lost an instance.
fn preempted(tenant_rules: &str) -> (Coordinator, Vec<String>) {
    let mut c = cluster("enablePreemption: true", tenant_rules);
    let out = apply(&mut c, &app("small", 10, "500m", 1), 1);
    run(&mut c, &out, 2);
    let out = apply(&mut c, &app("big", 20, "500m", 7), 3);
    run(&mut c, &out, 4);
    let out = apply(&mut c, &app("urgent", 500, "500m", 1), 5);
    let victims: Vec<String> = stopped(&out).iter().map(|i| i.app.name.clone()).collect();
    (c, victims)
}

#[test]
fn fair_share_within_tenant_takes_from_the_application_above_its_part() {
    // Without it: the lowest priority loses, however little it holds.
    let (_, victims) = preempted("");
    assert_eq!(victims, ["small"]);
    // With it: small holds 12.5 % of the pool, below its equal part (a third
    // of the tenant's 100 %); big holds 87.5 %: big gives the room.
    let (c, victims) = preempted("fairShareWithinTenant: true");
    assert_eq!(victims, ["big"]);
    assert_eq!(c.phase(&key("a", "small")), Some(Phase::Running));
    assert_eq!(c.phase(&key("a", "big")), Some(Phase::Degraded));
    let reason = c
        .describe(&key("a", "big"), t(5))
        .unwrap()
        .events
        .last()
        .unwrap()
        .reason
        .clone();
    assert!(
        reason.contains(
            "it held 87.5% of the pool, above its equal part 33.3% of tenant a's holding (fairShareWithinTenant)"
        ),
        "{reason}"
    );
}

#[test]
fn evict_on_capacity_loss_terminates_the_victim_and_releases_it() {
    let mut c = cluster(
        "enablePreemption: true, globalDegradation: {onCapacityLoss: Evict, belowPriority: 100}",
        "",
    );
    let out = apply(&mut c, &app("batch", 10, "1", 4), 1);
    run(&mut c, &out, 2);
    let out = apply(&mut c, &app("web", 500, "1", 1), 3);
    // The victim loses one instance to the preemption, then everything.
    assert_eq!(stopped(&out).len(), 4, "{out:?}");
    let k = key("a", "batch");
    assert_eq!(c.phase(&k), Some(Phase::Terminated));
    let ev = c.describe(&k, t(3)).unwrap().events.last().unwrap().clone();
    assert_eq!(ev.trigger, Trigger::Policy);
    assert_eq!(ev.from, Some(Phase::Degraded));
    assert_eq!(ev.policies, ["platform"]);
    assert!(
        ev.reason
            .contains("evicted by the global degradation policy platform (onCapacityLoss: Evict)"),
        "{}",
        ev.reason
    );
    // Its quota and placements are released: only web is charged and placed.
    let usage = c
        .tenants()
        .into_iter()
        .find(|(t, _)| t.name == "a")
        .unwrap()
        .1;
    assert_eq!((usage.apps, usage.request.cpu), (1, 1000), "{usage:?}");
    let n1 = c.cluster().index_of("n1").unwrap();
    assert_eq!(c.cluster().node(n1).unwrap().alloc.cpu, 1000);
    // Above belowPriority nobody is evicted: preempted by a 900, web (500)
    // degrades while bulk (50) is evicted.
    run(&mut c, &out, 4);
    let out = apply(&mut c, &app("bulk", 50, "1", 3), 5);
    run(&mut c, &out, 6);
    let out = apply(&mut c, &app("vip", 900, "4", 1), 7);
    assert!(!stopped(&out).is_empty());
    assert_eq!(c.phase(&key("a", "web")), Some(Phase::Degraded));
    assert_eq!(c.phase(&key("a", "bulk")), Some(Phase::Terminated));
}

#[test]
fn degraded_past_evict_after_is_evicted() {
    let mut c = cluster(
        "enablePreemption: true, globalDegradation: {evictAfter: 60s}",
        "",
    );
    let out = apply(&mut c, &app("batch", 10, "1", 4), 1);
    run(&mut c, &out, 2);
    apply(&mut c, &app("web", 500, "1", 1), 1_000);
    let k = key("a", "batch");
    assert_eq!(c.phase(&k), Some(Phase::Degraded));
    c.apply(Command::Tick, t(60_999)).unwrap();
    assert_eq!(c.phase(&k), Some(Phase::Degraded), "not before 60 s");
    let out = c.apply(Command::Tick, t(61_000)).unwrap();
    assert_eq!(c.phase(&k), Some(Phase::Terminated));
    assert_eq!(stopped(&out).len(), 3, "its remaining instances: {out:?}");
    let ev = out.events.last().unwrap();
    assert!(ev.reason.starts_with("degraded for 1m"), "{}", ev.reason);
    assert!(ev.reason.contains("(evictAfter 1m)"), "{}", ev.reason);
}

#[test]
fn scope_and_values_are_checked_with_their_path() {
    let err = |yaml: &str| {
        daros_coordinator::spec::parse(yaml, Format::Yaml)
            .unwrap_err()
            .to_string()
    };
    let tenant_policy = "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: p}\n\
                         spec: {scope: Tenant, tenant: a, rules: {globalDegradation: {onCapacityLoss: Evict}}}\n";
    let e = err(tenant_policy);
    assert!(e.contains("spec.rules.globalDegradation"), "{e}");
    assert!(e.contains("set it at Global scope"), "{e}");
    let e = err(&tenant_yaml("a", "policy: {globalDegradation: {}}"));
    assert!(e.contains("spec.policy.globalDegradation"), "{e}");
    let e = err(&app("x", 1, "1", 1).replace(
        "  priority: 1\n",
        "  priority: 1\n  policy: {fairShareWithinTenant: true}\n",
    ));
    assert!(e.contains("spec.policy.fairShareWithinTenant"), "{e}");
    let e = err(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: p}\n\
         spec: {scope: Global, rules: {globalDegradation: {onCapacityLoss: Evict, evictAfter: 5m}}}\n",
    );
    assert!(e.contains("spec.rules.globalDegradation.evictAfter"), "{e}");
    let e = err(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: p}\n\
         spec: {scope: Global, rules: {globalDegradation: {onCapacityLoss: Drop}}}\n",
    );
    assert!(e.contains("onCapacityLoss"), "{e}");
}

/// Running applications are re-evaluated when a policy changes: a
/// degradation policy written after `batch` started applies to it, and once
/// deleted no longer does.
#[test]
fn running_applications_take_a_changed_policy() {
    let mut c = cluster("enablePreemption: true", "");
    let out = apply(&mut c, &app("batch", 10, "1", 4), 1);
    run(&mut c, &out, 2);
    let evict = "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: degrade}\n\
                 spec: {scope: Global, rules: {globalDegradation: {onCapacityLoss: Evict}}}\n";
    apply(&mut c, evict, 3);
    let k = key("a", "batch");
    let d = c.describe(&k, t(3)).unwrap();
    assert!(
        d.policies.contains(&"degrade".to_string()),
        "{:?}",
        d.policies
    );
    apply(&mut c, &app("web", 500, "1", 1), 4);
    assert_eq!(c.phase(&k), Some(Phase::Terminated));

    // Deleted: the next victim only degrades.
    c.apply(
        Command::DeletePolicy {
            name: "degrade".into(),
        },
        t(5),
    )
    .unwrap();
    let out = apply(&mut c, &app("batch2", 10, "1", 3), 6);
    run(&mut c, &out, 7);
    apply(&mut c, &app("web2", 600, "1", 1), 8);
    assert_eq!(c.phase(&key("a", "batch2")), Some(Phase::Degraded));
}
