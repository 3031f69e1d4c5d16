//! Tenant-safe preemption (issue 19): an application cannot switch
//! preemption on by itself; with it on, another tenant's instances are taken
//! only while that tenant holds more than its fair share of the pool (its own
//! lower-priority instances always may be), and the victim is told both
//! shares.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

/// One 4-cpu node, tenants a and b (weights from `a_extra`/`b_extra`), and
/// a Global policy with `rules`.
fn cluster(rules: &str, a_extra: &str, b_extra: &str) -> Coordinator {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: platform}}\n\
             spec: {{scope: Global, rules: {{{rules}}}}}\n---\n",
            node_yaml("n1", "4", "16Gi", "", ""),
            tenant_yaml("a", a_extra),
            tenant_yaml("b", b_extra),
        ),
        0,
    );
    c
}

/// An application of `tenant` with `n` replicas of `cpu`, at `priority`,
/// with application-scope `policy` rules.
fn app(tenant: &str, name: &str, priority: u32, cpu: &str, n: u32, policy: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: {tenant}}}\nspec:\n  \
         priority: {priority}\n  policy: {{{policy}}}\n  workloads:\n    - name: w\n      \
         runtime: {{type: process}}\n      resources: {{cpu: {{request: \"{cpu}\"}}, memory: {{request: 64Mi}}}}\n      \
         replicas: {n}\n"
    )
}

fn run(c: &mut Coordinator, out: &Outcome, now: u64) {
    for id in started(out) {
        report(c, &id, ObservedState::Running, now);
    }
}

#[test]
fn an_application_cannot_enable_preemption_by_itself() {
    let mut c = cluster("", "", "");
    let out = apply(&mut c, &app("b", "batch", 10, "1", 4, ""), 1);
    run(&mut c, &out, 2);
    // Its own enablePreemption: true is not enough.
    apply(
        &mut c,
        &app("a", "web", 900, "2", 1, "enablePreemption: true"),
        3,
    );
    assert_eq!(c.phase(&key("b", "batch")), Some(Phase::Running));
    assert_ne!(c.phase(&key("a", "web")), Some(Phase::Running));
    let id = c.latest_decision(&key("a", "web")).unwrap();
    let x = c.explain(id).unwrap();
    let text = serde_json::to_string(&x).unwrap();
    assert!(
        text.contains("enabled only by a Global or Tenant scope"),
        "{text}"
    );
}

#[test]
fn another_tenant_within_its_fair_share_is_never_preempted() {
    // Weights 1:1 on a 4-cpu pool: each tenant's fair share is half.
    let mut c = cluster("enablePreemption: true", "", "");
    // a holds 2 cpu (its fair half) at low priority, b holds the other 2.
    let out = apply(&mut c, &app("a", "low", 10, "1", 2, ""), 1);
    run(&mut c, &out, 2);
    let out = apply(&mut c, &app("b", "mid", 20, "1", 2, ""), 3);
    run(&mut c, &out, 4);
    // b, at its fair share, wants more: a (within its share) is not taken.
    apply(&mut c, &app("b", "high", 900, "1", 1, ""), 5);
    assert_eq!(c.phase(&key("a", "low")), Some(Phase::Running));
    assert_ne!(c.phase(&key("b", "high")), Some(Phase::Running));
    // b's own lower-priority application may be.
    apply(&mut c, &app("b", "urgent", 900, "2", 1, ""), 6);
    assert_eq!(c.phase(&key("b", "mid")), Some(Phase::Degraded));
    assert_eq!(c.phase(&key("a", "low")), Some(Phase::Running));
}

#[test]
fn a_tenant_above_its_fair_share_may_be_preempted_and_is_told_both_shares() {
    let mut c = cluster("enablePreemption: true", "", "");
    // b holds the whole pool: 100 % against a fair share of 50 %.
    let out = apply(&mut c, &app("b", "batch", 10, "1", 4, ""), 1);
    run(&mut c, &out, 2);
    apply(&mut c, &app("a", "web", 900, "2", 1, ""), 3);
    assert_eq!(c.phase(&key("b", "batch")), Some(Phase::Degraded));
    let reason = &c
        .list_apps(t(3))
        .into_iter()
        .find(|s| s.app == key("b", "batch"))
        .unwrap()
        .reason;
    assert!(
        reason.contains("tenant b held 100.0% of pool default, above its fair share 50.0%"),
        "{reason}"
    );
}

#[test]
fn priorities_above_900_are_the_platforms_to_grant() {
    let mut c = cluster("", "", "quota: {priorityCeiling: 1000}");
    let out = apply(&mut c, &app("a", "vip", 950, "1", 1, ""), 1);
    assert_eq!(c.phase(&key("a", "vip")), Some(Phase::Rejected), "{out:?}");
    let reason = &c.list_apps(t(1))[0].reason;
    assert!(reason.contains("950") && reason.contains("900"), "{reason}");
    // A tenant granted a higher ceiling may use it.
    apply(&mut c, &app("b", "vip", 950, "1", 1, ""), 2);
    assert_ne!(c.phase(&key("b", "vip")), Some(Phase::Rejected));
}
