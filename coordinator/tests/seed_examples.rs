//! The examples of the seed design as tests: the policy merge of §8.3, the
//! application-level constraints of §2.4.4, and the transitions of §6.4.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::model::ratio::Ratio;
use daros_coordinator::placement::RejectReason;
use daros_coordinator::*;

fn cluster(nodes: &[(&str, &str, &str)]) -> String {
    nodes
        .iter()
        .map(|(n, cpu, rack)| node_yaml(n, cpu, "64Gi", "", &format!("rack: {rack}")))
        .collect()
}

/// §8.3: global allows overcommit 1.5, the tenant limits it to 1.2, the
/// application asks 1.3: the application gets 1.2, and placement obeys it.
#[test]
fn policy_merge_overcommit_tighter_bound_wins() {
    let mut c = Coordinator::new();
    let base = format!(
        "{}{}apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: platform}}\nspec: {{scope: Global, rules: {{maxOvercommitRatio: 1.5}}}}\n---\n",
        cluster(&[("n1", "10", "r1")]),
        tenant_yaml("acme", "policy: {maxOvercommitRatio: 1.2}"),
    );
    apply(&mut c, &base, 0);
    let app = |replicas: u32| {
        format!(
            "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: batch, tenant: acme}}\nspec:\n  policy: {{maxOvercommitRatio: 1.3}}\n  workloads:\n    - name: w\n      runtime: {{type: process}}\n      resources: {{cpu: {{request: \"1\"}}, memory: {{request: 1Gi}}}}\n      replicas: {replicas}\n"
        )
    };
    // 13 one-core replicas fit under 1.3 (13 cores) but not under 1.2 (12).
    let out = apply(&mut c, &app(13), 1);
    let k = key("acme", "batch");
    assert_eq!(c.phase(&k), Some(Phase::Failed));
    let d = c.explain(*out.decisions.last().unwrap()).unwrap();
    assert!(!d.accepted);
    assert_eq!(d.constraints.as_ref().unwrap().overcommit, Ratio(1200));
    let failing = d.placements.last().unwrap();
    assert_eq!(failing.replica, "w/12");
    assert_eq!(failing.rejected.get(RejectReason::InsufficientCpu), 1);
    let r = d
        .resolutions
        .iter()
        .find(|r| r.field == "maxOvercommitRatio")
        .unwrap();
    assert_eq!(
        (r.value.as_str(), r.decided_by.as_str()),
        ("1.2", "tenant:acme")
    );
    let asked: Vec<_> = r.overridden.iter().map(|o| o.asked.as_str()).collect();
    assert_eq!(asked, ["1.5", "1.3"]);
    assert!(
        d.render()
            .contains("maxOvercommitRatio = 1.2 by tenant:acme")
    );

    // 12 replicas fit exactly under 1.2 (and would not under 1.0).
    operate(&mut c, &k, OperationRequest::Delete, 2).unwrap();
    apply(&mut c, &app(12), 3);
    assert_eq!(c.phase(&k), Some(Phase::Scheduled));
    let n = &c.cluster().nodes()[0];
    assert_eq!(n.alloc.cpu, 12_000);
    // Every evaluation is recorded.
    assert!(c.evaluations().iter().filter(|e| e.app == k).count() >= 2);
}

/// §8.3 "冲突策略直接裁决失败": a real conflict fails with an explicit error
/// naming both policies, as a policy-triggered rejection.
#[test]
fn policy_conflict_rejects_with_both_policies_named() {
    let mut c = Coordinator::new();
    let base = format!(
        "{}{}apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: platform}}\nspec: {{scope: Global, rules: {{allowedRuntimeTypes: [container, process]}}}}\n---\n",
        cluster(&[("n1", "4", "r1")]),
        tenant_yaml("acme", ""),
    );
    apply(&mut c, &base, 0);
    let out = apply(
        &mut c,
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: vmapp, tenant: acme}\nspec:\n  policy: {allowedRuntimeTypes: [vm]}\n  workloads: [{name: w, runtime: {type: vm}}]\n",
        1,
    );
    let k = key("acme", "vmapp");
    assert_eq!(c.phase(&k), Some(Phase::Rejected));
    let ev = out.events.last().unwrap();
    assert_eq!(ev.trigger, Trigger::Policy);
    assert!(
        ev.reason.contains("policy conflict on allowedRuntimeTypes"),
        "{}",
        ev.reason
    );
    assert!(
        ev.reason.contains("application:acme/vmapp"),
        "{}",
        ev.reason
    );
    assert!(ev.reason.contains("platform"), "{}", ev.reason);
    assert_eq!(out.refusals.len(), 1);
    // Rejected accepts only Delete; a corrected apply replaces it.
    let e = operate(&mut c, &k, OperationRequest::Start, 2).unwrap_err();
    assert!(e.to_string().contains("Rejected accepts: Delete"), "{e}");
    let out = apply(
        &mut c,
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: vmapp, tenant: acme}\nspec:\n  workloads: [{name: w, runtime: {type: process}}]\n",
        3,
    );
    assert_eq!(
        transitions(&out),
        [
            "Rejected->[deleted]",
            "*->Created",
            "Created->Admitted",
            "Admitted->Scheduled"
        ]
    );
}

/// §2.4.4 "这个应用最多只能占用整个集群20%的资源".
#[test]
fn constraint_max_cluster_share() {
    let mut c = Coordinator::new();
    let nodes: Vec<(String, &str, &str)> = (0..10).map(|i| (format!("n{i}"), "4", "r1")).collect();
    let nodes: Vec<(&str, &str, &str)> =
        nodes.iter().map(|(a, b, r)| (a.as_str(), *b, *r)).collect();
    apply(
        &mut c,
        &format!("{}{}", cluster(&nodes), tenant_yaml("acme", "")),
        0,
    );
    let app = |name: &str, cores: &str| {
        format!(
            "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: acme}}\nspec:\n  policy: {{maxClusterShare: \"20%\"}}\n  workloads:\n    - {{name: w, runtime: {{type: process}}, replicas: 3, resources: {{cpu: {{request: \"{cores}\"}}}}}}\n"
        )
    };
    let out = apply(&mut c, &app("big", "3"), 1);
    assert_eq!(c.phase(&key("acme", "big")), Some(Phase::Rejected));
    assert!(
        out.refusals[0].reason.contains(
            "maxClusterShare: over the largest share of the cluster: cpu 9 > 8 (0.2 of 40)"
        ),
        "{}",
        out.refusals[0].reason
    );
    apply(&mut c, &app("fits", "2"), 2);
    assert_eq!(c.phase(&key("acme", "fits")), Some(Phase::Scheduled));
}

/// §2.4.4 "该应用的副本必须分布在至少3个机架".
#[test]
fn constraint_replicas_over_three_racks() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            cluster(&[
                ("a1", "8", "r1"),
                ("a2", "8", "r1"),
                ("b1", "8", "r2"),
                ("b2", "8", "r2")
            ]),
            tenant_yaml("acme", "policy: {minFailureDomains: {key: rack, count: 3}}")
        ),
        0,
    );
    let app = app_yaml("acme", "web", 10, &[("front", "1", 3, &[])]);
    let out = apply(&mut c, &app, 1);
    let k = key("acme", "web");
    assert_eq!(c.phase(&k), Some(Phase::Failed));
    let d = c.explain(*out.decisions.last().unwrap()).unwrap();
    let last = d.placements.last().unwrap();
    assert_eq!(last.replica, "front/2");
    assert_eq!(last.rejected.get(RejectReason::FailureDomainSpread), 4);
    // A third rack appears: Retry places one replica per rack.
    apply(&mut c, &cluster(&[("c1", "8", "r3")]), 2);
    operate(&mut c, &k, OperationRequest::Retry, 3).unwrap();
    assert_eq!(c.phase(&k), Some(Phase::Scheduled));
    let desc = c.describe(&k, t(3)).unwrap();
    let mut racks: Vec<String> = desc
        .instances
        .iter()
        .map(|i| i.node.clone().unwrap()[..1].to_string())
        .collect();
    racks.sort();
    assert_eq!(racks, ["a", "b", "c"]);
}

/// §2.4.4 "当下游组件未Ready时，不允许上游扩容".
#[test]
fn constraint_no_upstream_scale_while_downstream_not_ready() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            cluster(&[("n1", "16", "r1")]),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let yaml = "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: shop, tenant: acme}\nspec:\n  workloads:\n    - {name: db, runtime: {type: process}, resources: {cpu: {request: \"1\"}}}\n    - {name: web, runtime: {type: process}, resources: {cpu: {request: \"1\"}}, replicas: {min: 1, max: 4}, dependsOn: [db]}\n";
    let out = apply(&mut c, yaml, 1);
    let k = key("acme", "shop");
    let db = started(&out)[0].clone();
    let out = report(&mut c, &db, ObservedState::Running, 2);
    let web = started(&out)[0].clone();
    report(&mut c, &web, ObservedState::Running, 3);
    assert_eq!(c.phase(&k), Some(Phase::Running));
    // db goes down (restarting): scaling web up is refused.
    report(&mut c, &db, ObservedState::Exited { code: 1 }, 4);
    assert_eq!(c.phase(&k), Some(Phase::Degraded));
    // Degraded accepts Scale, but not upward while db is not ready.
    let out = operate(
        &mut c,
        &k,
        OperationRequest::Scale {
            workload: "web".into(),
            replicas: 3,
        },
        5,
    )
    .unwrap();
    assert!(
        out.refusals[0]
            .reason
            .contains("dependency not ready: db (0/1 ready)"),
        "{out:?}"
    );
    report(&mut c, &db, ObservedState::Starting, 1005);
    let out = report(&mut c, &db, ObservedState::Running, 1006);
    assert_eq!(transitions(&out), ["Degraded->Running"]);
    // Running, db starting again after a stop reported by its runtime.
    report(&mut c, &db, ObservedState::Starting, 1007);
    let out = operate(
        &mut c,
        &k,
        OperationRequest::Scale {
            workload: "web".into(),
            replicas: 3,
        },
        1008,
    )
    .unwrap();
    assert_eq!(out.refusals.len(), 1);
    assert!(
        out.refusals[0]
            .reason
            .contains("dependency not ready: db (0/1 ready)"),
        "{}",
        out.refusals[0].reason
    );
    // db ready: scaling proceeds.
    report(&mut c, &db, ObservedState::Running, 1009);
    let out = operate(
        &mut c,
        &k,
        OperationRequest::Scale {
            workload: "web".into(),
            replicas: 3,
        },
        1010,
    )
    .unwrap();
    assert!(out.refusals.is_empty(), "{:?}", out.refusals);
    assert_eq!(started(&out).len(), 2);
    assert_eq!(transitions(&out), ["Running->Running"]);
    assert!(out.events[0].reason.contains("scaled web from 1 to 3"));
    // Out of the spec's bounds is an error.
    let e = operate(
        &mut c,
        &k,
        OperationRequest::Scale {
            workload: "web".into(),
            replicas: 5,
        },
        1011,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "scale acme/shop workload web: 5 replicas is outside spec.workloads[web].replicas \
         {min: 1, max: 4}; scale within it, to 0 to park the workload, or apply a spec with \
         other bounds"
    );
    // 0 parks web (below its min): its replicas stop, the application stays
    // Running, and scaling back up places them again.
    let out = operate(
        &mut c,
        &k,
        OperationRequest::Scale {
            workload: "web".into(),
            replicas: 0,
        },
        1012,
    )
    .unwrap();
    assert_eq!(stopped(&out).len(), 3, "{out:?}");
    assert_eq!(c.phase(&k), Some(Phase::Running));
    let out = operate(
        &mut c,
        &k,
        OperationRequest::Scale {
            workload: "web".into(),
            replicas: 2,
        },
        1013,
    )
    .unwrap();
    assert_eq!(started(&out).len(), 2, "{out:?}");
}

/// §2.4.4 "同一租户的应用之间需要公平调度" and §7.3.2: tenants share a pool by
/// weighted dominant resource fairness; within a tenant, priority decides.
#[test]
fn constraint_fair_share_between_tenants_then_priority() {
    let run = |weight_b: u32| {
        let mut c = Coordinator::new();
        apply(
            &mut c,
            &format!(
                "{}{}{}",
                cluster(&[("n1", "8", "r1")]),
                tenant_yaml("alpha", ""),
                tenant_yaml("beta", &format!("policy: {{fairShareWeight: {weight_b}}}"))
            ),
            0,
        );
        let mut batch = String::new();
        for i in 0..8 {
            batch.push_str(&app_yaml(
                "alpha",
                &format!("a{i}"),
                i,
                &[("w", "1", 1, &[])],
            ));
            batch.push_str(&app_yaml(
                "beta",
                &format!("b{i}"),
                i,
                &[("w", "1", 1, &[])],
            ));
        }
        apply(&mut c, &batch, 1);
        let placed = |t: &str| -> Vec<String> {
            c.list_apps(Timestamp(0))
                .into_iter()
                .filter(|a| a.app.tenant == t && a.phase == Phase::Scheduled)
                .map(|a| a.app.name)
                .collect()
        };
        (placed("alpha"), placed("beta"))
    };
    let (a, b) = run(1);
    assert_eq!((a.len(), b.len()), (4, 4));
    // Within each tenant the highest priorities won.
    assert_eq!(a, ["a4", "a5", "a6", "a7"]);
    let (a, b) = run(3);
    assert_eq!(
        (a.len(), b.len()),
        (2, 6),
        "weight 3 gets three times the share"
    );
}

/// §6.4: every edge of the diagram driven through the coordinator, with its
/// trigger; illegal operations change nothing.
#[test]
fn transitions_of_the_diagram() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            cluster(&[("n1", "4", "r1")]),
            tenant_yaml("acme", "quota: {cpu: \"3\"}")
        ),
        0,
    );
    // Created -> Rejected (quota).
    let out = apply(
        &mut c,
        &app_yaml("acme", "huge", 1, &[("w", "4", 1, &[])]),
        1,
    );
    assert_eq!(transitions(&out), ["*->Created", "Created->Rejected"]);
    assert!(
        out.events[1].reason.contains("quota.cpu"),
        "{}",
        out.events[1].reason
    );
    // Created -> Admitted -> Failed (arbitration: no node is that big).
    apply(&mut c, &tenant_yaml("acme", "quota: {cpu: \"64\"}"), 2);
    let out = apply(
        &mut c,
        &app_yaml("acme", "toobig", 1, &[("w", "5", 1, &[])]),
        3,
    );
    assert_eq!(
        transitions(&out),
        ["*->Created", "Created->Admitted", "Admitted->Failed"]
    );
    // Created -> Admitted -> Scheduled -> Running -> Degraded -> Running -> Terminated.
    let out = apply(&mut c, &app_yaml("acme", "ok", 1, &[("w", "1", 1, &[])]), 4);
    assert_eq!(
        transitions(&out),
        ["*->Created", "Created->Admitted", "Admitted->Scheduled"]
    );
    let k = key("acme", "ok");
    let w = started(&out)[0].clone();
    assert_eq!(
        transitions(&report(&mut c, &w, ObservedState::Running, 5)),
        ["Scheduled->Running"]
    );
    assert_eq!(
        transitions(&report(&mut c, &w, ObservedState::Exited { code: 2 }, 6)),
        ["Running->Degraded"]
    );
    assert_eq!(
        transitions(&report(&mut c, &w, ObservedState::Running, 2000)),
        ["Degraded->Running"]
    );
    // Illegal operations are refused and change nothing.
    let before = c.describe(&k, t(2001)).unwrap();
    for op in [
        OperationRequest::Start,
        OperationRequest::Restore,
        OperationRequest::Retry,
    ] {
        let e = operate(&mut c, &k, op, 2001).unwrap_err();
        assert!(matches!(e, CoordinatorError::Illegal { .. }), "{e}");
    }
    assert_eq!(c.describe(&k, t(2001)).unwrap(), before);
    let out = operate(&mut c, &k, OperationRequest::Stop, 2002).unwrap();
    assert_eq!(transitions(&out), ["Running->Terminated"]);
    assert_eq!(out.events[0].trigger, Trigger::User);
    assert_eq!(stopped(&out), std::slice::from_ref(&w));
    assert_eq!(
        transitions(&operate(&mut c, &k, OperationRequest::Delete, 2003).unwrap()),
        ["Terminated->[deleted]"]
    );

    // Scheduled -> Failed: the runtime cannot run it (Never restart).
    let yaml = "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: once, tenant: acme}\nspec:\n  lifecyclePolicy: {restart: Never}\n  workloads: [{name: w, runtime: {type: process}}]\n";
    let out = apply(&mut c, yaml, 3000);
    let w = started(&out)[0].clone();
    let fail = ObservedState::Failed {
        failure: model::failure::Failure::Runtime(
            model::failure::RuntimeFailure::AdapterCommunicationError {
                detail: "shim unreachable".into(),
            },
        ),
    };
    let out = report(&mut c, &w, fail.clone(), 3001);
    assert_eq!(transitions(&out), ["Scheduled->Failed"]);
    assert!(
        out.events[0]
            .reason
            .contains("adapter communication error: shim unreachable")
    );

    // Running -> Failed and Running -> Terminated (finished), Degraded -> Failed.
    operate(&mut c, &key("acme", "once"), OperationRequest::Delete, 3002).unwrap();
    let out = apply(&mut c, yaml, 3003);
    let w = started(&out)[0].clone();
    report(&mut c, &w, ObservedState::Running, 3004);
    let out = report(&mut c, &w, ObservedState::Exited { code: 0 }, 3005);
    assert_eq!(
        transitions(&out),
        ["Running->Terminated"],
        "Never + exit 0: finished"
    );
    operate(&mut c, &key("acme", "once"), OperationRequest::Delete, 3006).unwrap();
    let out = apply(&mut c, yaml, 3007);
    let w = started(&out)[0].clone();
    report(&mut c, &w, ObservedState::Running, 3008);
    assert_eq!(
        transitions(&report(&mut c, &w, fail, 3009)),
        ["Running->Failed"]
    );

    // Degraded -> Failed: retries exhausted while degraded.
    let yaml = "apiVersion: daros.io/v1\nkind: Application\nmetadata: {name: flaky, tenant: acme}\nspec:\n  lifecyclePolicy: {restart: OnFailure, maxRetries: 1}\n  workloads: [{name: w, runtime: {type: process}}]\n";
    let out = apply(&mut c, yaml, 4000);
    let w = started(&out)[0].clone();
    report(&mut c, &w, ObservedState::Running, 4001);
    assert_eq!(
        transitions(&report(&mut c, &w, ObservedState::Exited { code: 1 }, 4002)),
        ["Running->Degraded"]
    );
    assert_eq!(
        transitions(&report(&mut c, &w, ObservedState::Exited { code: 1 }, 6000)),
        ["Degraded->Failed"]
    );
    // Degraded -> Terminated: stop while degraded.
    let yaml2 = yaml.replace("flaky", "flaky2");
    let out = apply(&mut c, &yaml2, 7000);
    let w = started(&out)[0].clone();
    report(&mut c, &w, ObservedState::Running, 7001);
    report(&mut c, &w, ObservedState::Exited { code: 1 }, 7002);
    let out = operate(&mut c, &key("acme", "flaky2"), OperationRequest::Stop, 7003).unwrap();
    assert_eq!(transitions(&out), ["Degraded->Terminated"]);
    // Every event names its trigger and reason.
    assert!(c.events().iter().all(|e| !e.reason.is_empty()));
}
