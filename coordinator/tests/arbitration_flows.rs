//! Preemption, rolling updates and rollback, node loss, strategies,
//! explain and what-if.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::reconcile::ActionKind;
use daros_coordinator::*;

fn base(extra_policy: &str) -> String {
    format!(
        "{}{}{}apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: platform}}\nspec: {{scope: Global, rules: {{{extra_policy}}}}}\n---\n",
        node_yaml("n1", "4", "16Gi", "", "rack: r1"),
        tenant_yaml("low", ""),
        tenant_yaml("high", "")
    )
}

fn run_all(c: &mut Coordinator, out: &Outcome, now: u64) {
    for id in started(out) {
        report(c, &id, ObservedState::Running, now);
    }
}

#[test]
fn preemption_degrades_the_lower_priority_victim_with_reason() {
    let mut c = Coordinator::new();
    apply(&mut c, &base("enablePreemption: true"), 0);
    let out = apply(
        &mut c,
        &app_yaml("low", "batch", 10, &[("w", "1", 4, &[])]),
        1,
    );
    run_all(&mut c, &out, 2);
    let victim = key("low", "batch");
    assert_eq!(c.phase(&victim), Some(Phase::Running));
    let out = apply(
        &mut c,
        &app_yaml("high", "web", 900, &[("w", "2", 1, &[])]),
        3,
    );
    let web = key("high", "web");
    assert_eq!(c.phase(&web), Some(Phase::Scheduled));
    let ev = out
        .events
        .iter()
        .find(|e| e.app == victim)
        .expect("victim event");
    assert_eq!(ev.trigger, Trigger::Policy);
    assert_eq!(ev.to, lifecycle::Target::Phase(Phase::Degraded));
    assert!(
        ev.reason.contains("preempted by high/web (priority 900"),
        "{}",
        ev.reason
    );
    // Two one-core replicas make room for the two-core replica, and are stopped.
    let stops: Vec<_> = stopped(&out)
        .into_iter()
        .filter(|i| i.app == victim)
        .collect();
    assert_eq!(stops.len(), 2);
    let d = c.explain(c.latest_decision(&web).unwrap()).unwrap();
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].0.victim, victim);
    assert!(
        d.render()
            .contains("Preempted low/batch (priority 10) on n1")
    );
    let desc = c.describe(&victim, t(3)).unwrap();
    assert_eq!(
        desc.instances
            .iter()
            .filter(|i| i.evicted.is_some())
            .count(),
        2
    );
    // Restore fails while there is no room, and says so.
    let out = operate(&mut c, &victim, OperationRequest::Restore, 4).unwrap();
    assert_eq!(out.refusals.len(), 1);
    assert_eq!(c.phase(&victim), Some(Phase::Degraded));
    // Room again: Restore re-places and the victim recovers once running.
    operate(&mut c, &web, OperationRequest::Delete, 5).unwrap();
    let out = operate(&mut c, &victim, OperationRequest::Restore, 6).unwrap();
    assert!(out.refusals.is_empty(), "{:?}", out.refusals);
    let restarted = started(&out);
    assert_eq!(restarted.len(), 2);
    report(&mut c, &restarted[0], ObservedState::Running, 7);
    let out = report(&mut c, &restarted[1], ObservedState::Running, 8);
    assert_eq!(transitions(&out), ["Degraded->Running"]);
}

#[test]
fn preempted_replicas_come_back_when_resources_recover() {
    let mut c = Coordinator::new();
    apply(&mut c, &base("enablePreemption: true"), 0);
    let out = apply(
        &mut c,
        &app_yaml("low", "batch", 10, &[("w", "1", 4, &[])]),
        1,
    );
    run_all(&mut c, &out, 2);
    let victim = key("low", "batch");
    apply(
        &mut c,
        &app_yaml("high", "web", 900, &[("w", "2", 1, &[])]),
        3,
    );
    assert_eq!(c.phase(&victim), Some(Phase::Degraded));
    // Nothing changed in capacity: a tick does not retry.
    let out = c.apply(Command::Tick, t(4)).unwrap();
    assert!(out.decisions.is_empty(), "{:?}", out.decisions);
    // The preemptor leaves: the next tick re-places the victim's replicas.
    operate(&mut c, &key("high", "web"), OperationRequest::Delete, 5).unwrap();
    let out = c.apply(Command::Tick, t(6)).unwrap();
    let back = started(&out);
    assert_eq!(back.len(), 2, "{:?}", out.notes);
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("evicted replicas re-placed"))
    );
    for id in &back {
        report(&mut c, id, ObservedState::Running, 7);
    }
    assert_eq!(c.phase(&victim), Some(Phase::Running));
    let ev = c.events_of(&victim).into_iter().last().unwrap().clone();
    assert_eq!(
        (ev.from, ev.trigger),
        (Some(Phase::Degraded), Trigger::System)
    );
}

#[test]
fn no_preemption_without_policy_or_of_equal_priority() {
    let mut c = Coordinator::new();
    apply(&mut c, &base("enablePreemption: false"), 0);
    let out = apply(
        &mut c,
        &app_yaml("low", "batch", 10, &[("w", "1", 4, &[])]),
        1,
    );
    run_all(&mut c, &out, 2);
    apply(
        &mut c,
        &app_yaml("high", "web", 900, &[("w", "2", 1, &[])]),
        3,
    );
    assert_eq!(c.phase(&key("high", "web")), Some(Phase::Failed));
    assert_eq!(c.phase(&key("low", "batch")), Some(Phase::Running));

    let mut c = Coordinator::new();
    apply(&mut c, &base("enablePreemption: true"), 0);
    let out = apply(
        &mut c,
        &app_yaml("low", "batch", 500, &[("w", "1", 4, &[])]),
        1,
    );
    run_all(&mut c, &out, 2);
    apply(
        &mut c,
        &app_yaml("high", "web", 500, &[("w", "2", 1, &[])]),
        3,
    );
    assert_eq!(c.phase(&key("high", "web")), Some(Phase::Failed));
}

#[test]
fn rolling_update_replaces_one_instance_at_a_time_and_rollback_is_a_new_version() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "8", "16Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let v1 = app_yaml(
        "acme",
        "shop",
        1,
        &[("db", "1", 1, &[]), ("web", "1", 2, &["db"])],
    );
    let out = apply(&mut c, &v1, 1);
    let k = key("acme", "shop");
    let db = started(&out)[0].clone();
    let out = report(&mut c, &db, ObservedState::Running, 2);
    for id in started(&out) {
        report(&mut c, &id, ObservedState::Running, 3);
    }
    assert_eq!(c.phase(&k), Some(Phase::Running));

    // Version 2 changes web only.
    let v2 = app_yaml(
        "acme",
        "shop",
        1,
        &[("db", "1", 1, &[]), ("web", "500m", 2, &["db"])],
    );
    let out = apply(&mut c, &v2, 10);
    assert_eq!(transitions(&out), ["Running->Running"]);
    assert!(
        out.events[0]
            .reason
            .contains("version 2; rolling update of web"),
        "{}",
        out.events[0].reason
    );
    // First: stop web/0 v1 only. db is untouched.
    assert_eq!(out.actions.len(), 1, "{:?}", out.actions);
    let stop = stopped(&out);
    assert_eq!(stop[0].to_string(), "acme/shop/web/0/v1");
    let out = report(&mut c, &stop[0], ObservedState::Stopped, 11);
    let s = started(&out);
    assert_eq!(s[0].to_string(), "acme/shop/web/0/v2");
    // web/1 waits until web/0 v2 is ready.
    assert!(stopped(&out).is_empty());
    let out = report(&mut c, &s[0], ObservedState::Running, 12);
    assert_eq!(stopped(&out)[0].to_string(), "acme/shop/web/1/v1");
    let out = report(&mut c, &stopped(&out)[0], ObservedState::Stopped, 13);
    let s1 = started(&out)[0].clone();
    let out = report(&mut c, &s1, ObservedState::Running, 14);
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("rolling update to version 2 complete")),
        "{:?}",
        out.notes
    );
    assert_eq!(
        c.phase(&k),
        Some(Phase::Running),
        "a planned replacement does not degrade"
    );
    assert_eq!(c.cluster().nodes()[0].alloc.cpu, 2000);

    // Rollback to version 1 becomes version 3, through the lifecycle.
    let out = c
        .apply(
            Command::Rollback {
                app: k.clone(),
                version: 1,
            },
            t(20),
        )
        .unwrap();
    assert_eq!(transitions(&out), ["Running->Running"]);
    assert!(
        out.events[0]
            .reason
            .contains("rolled back to the spec of version 1 as version 3")
    );
    let vs = c.versions(&k).unwrap();
    assert_eq!(vs.len(), 3);
    assert_eq!(vs[2].spec, vs[0].spec);
    assert_eq!(stopped(&out)[0].to_string(), "acme/shop/web/0/v2");
    let e = c
        .apply(
            Command::Rollback {
                app: k.clone(),
                version: 9,
            },
            t(21),
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("has no version 9 (versions 1..=3)"),
        "{e}"
    );
}

#[test]
fn refused_update_keeps_the_running_version() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "4", "16Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let out = apply(
        &mut c,
        &app_yaml("acme", "shop", 1, &[("web", "1", 1, &[])]),
        1,
    );
    run_all(&mut c, &out, 2);
    let k = key("acme", "shop");
    let before = c.describe(&k, t(3)).unwrap();
    let out = apply(
        &mut c,
        &app_yaml("acme", "shop", 1, &[("web", "8", 1, &[])]),
        3,
    );
    assert_eq!(out.refusals.len(), 1);
    assert!(
        out.refusals[0].reason.contains("version 2 refused"),
        "{}",
        out.refusals[0].reason
    );
    assert!(out.actions.is_empty() && out.events.is_empty());
    let after = c.describe(&k, t(3)).unwrap();
    assert_eq!(after.version, 1);
    assert_eq!(after.instances, before.instances);
    assert_eq!(c.cluster().nodes()[0].alloc.cpu, 1000);
    // The refusal is explained.
    let d = c.explain(out.refusals[0].decision.unwrap()).unwrap();
    assert!(!d.accepted);
    assert!(d.render().contains("insufficient cpu"), "{}", d.render());
}

#[test]
fn node_loss_replaces_instances_elsewhere_or_degrades() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}",
            node_yaml("n1", "4", "16Gi", "", ""),
            node_yaml("n2", "4", "16Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    let out = apply(
        &mut c,
        &app_yaml("acme", "shop", 1, &[("web", "2", 2, &[])]),
        1,
    );
    run_all(&mut c, &out, 2);
    let k = key("acme", "shop");
    // Bin-pack puts both on one node.
    let d = c.describe(&k, t(2)).unwrap();
    let node = d.instances[0].node.clone().unwrap();
    assert!(
        d.instances
            .iter()
            .all(|i| i.node.as_deref() == Some(node.as_str()))
    );
    // Down: unreachable, not lost: Degraded, nothing moves before lostAfter (30 s).
    let out = c
        .apply(
            Command::SetNodeCondition {
                node: node.clone(),
                condition: NodeCondition::Down,
            },
            t(3),
        )
        .unwrap();
    assert!(started(&out).is_empty(), "{out:?}");
    assert_eq!(transitions(&out), ["Running->Degraded"]);
    assert!(
        out.events[0].reason.contains("unreachable"),
        "{}",
        out.events[0].reason
    );
    assert!(
        c.apply(Command::Tick, t(29_000))
            .map(|o| started(&o))
            .unwrap()
            .is_empty()
    );
    let out = c.apply(Command::Tick, t(30_003)).unwrap();
    let moved = started(&out);
    assert_eq!(moved.len(), 2);
    assert!(
        out.actions
            .iter()
            .filter(|a| matches!(a.kind, ActionKind::Start { .. }))
            .all(|a| a.node != node)
    );
    for id in &moved {
        report(&mut c, id, ObservedState::Running, 30_004);
    }
    assert_eq!(c.phase(&k), Some(Phase::Running));
    // The other node goes too: after lostAfter nowhere to go, Degraded with the reason.
    let other = c.describe(&k, t(30_004)).unwrap().instances[0]
        .node
        .clone()
        .unwrap();
    c.apply(
        Command::SetNodeCondition {
            node: other.clone(),
            condition: NodeCondition::Down,
        },
        t(30_005),
    )
    .unwrap();
    assert_eq!(c.phase(&k), Some(Phase::Degraded));
    c.apply(Command::Tick, t(60_005)).unwrap();
    let d = c.describe(&k, t(60_005)).unwrap();
    assert_eq!(d.phase, Phase::Degraded);
    let why = d.degradation.unwrap().reason;
    assert!(why.contains(&format!("node {other} down")), "{why}");
    assert!(why.contains("not re-placed"), "{why}");
}

#[test]
fn strategies_choose_differently() {
    let place = |strategy: &str| {
        let mut c = Coordinator::new();
        apply(
            &mut c,
            &format!(
                "{}{}{}{}",
                node_yaml("small", "4", "16Gi", "", "rack: r1"),
                node_yaml("large", "16", "64Gi", "", "rack: r2"),
                tenant_yaml(
                    "acme",
                    &format!("policy: {{placementStrategy: {strategy}}}")
                ),
                app_yaml("acme", "a", 1, &[("w", "1", 2, &[])])
            ),
            0,
        );
        let d = c.describe(&key("acme", "a"), t(0)).unwrap();
        d.instances
            .iter()
            .map(|i| i.node.clone().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(place("bin-pack"), ["small", "small"]);
    assert_eq!(place("spread"), ["large", "small"]);
    assert_eq!(place("fair-share"), ["large", "large"]);
}

#[test]
fn what_if_changes_nothing_and_suggests() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "4", "16Gi", "", ""),
            tenant_yaml("acme", "quota: {cpu: \"2\"}")
        ),
        0,
    );
    let decisions = c.decisions().len();
    let events = c.events().len();
    let r = c
        .what_if(
            docs(&app_yaml("acme", "big", 1, &[("w", "3", 1, &[])])),
            t(1),
        )
        .unwrap();
    assert_eq!(r.phases, [(key("acme", "big"), Some(Phase::Rejected))]);
    assert!(
        r.suggestions[0].contains("raise tenant acme's cpu"),
        "{:?}",
        r.suggestions
    );
    assert!(r.render().contains("What-if (nothing was changed)"));
    assert_eq!((c.decisions().len(), c.events().len()), (decisions, events));
    assert!(c.phase(&key("acme", "big")).is_none());
    // A placeable one predicts its placement.
    let r = c
        .what_if(
            docs(&app_yaml("acme", "ok", 1, &[("w", "1", 1, &[])])),
            t(1),
        )
        .unwrap();
    assert_eq!(r.phases[0].1, Some(Phase::Scheduled));
    let placed = r
        .explanations
        .iter()
        .find(|e| e.accepted && !e.placements.is_empty())
        .unwrap();
    assert_eq!(placed.placements[0].selected.as_deref(), Some("n1"));
    assert!(c.list_apps(Timestamp(0)).is_empty());
}

#[test]
fn bad_commands_change_nothing() {
    let mut c = Coordinator::new();
    apply(&mut c, &node_yaml("n1", "4", "16Gi", "", ""), 0);
    let e = c
        .apply(
            Command::Apply {
                documents: docs(&app_yaml("nobody", "a", 1, &[("w", "1", 1, &[])])),
                start: true,
            },
            t(1),
        )
        .unwrap_err();
    assert!(e.to_string().contains("unknown tenant \"nobody\""), "{e}");
    assert!(c.list_apps(Timestamp(0)).is_empty());
    // A document built in code is validated too.
    let mut app = spec::parse_application(
        &app_yaml("acme", "a", 1, &[("w", "1", 1, &[])]),
        Format::Yaml,
    )
    .unwrap();
    app.spec.workloads[0].resources.cpu.limit = Some(MilliCpu(1));
    let e = c
        .apply(
            Command::Apply {
                documents: docs(&tenant_yaml("acme", ""))
                    .into_iter()
                    .chain([Document::Application(app)])
                    .collect(),
                start: true,
            },
            t(2),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.workloads[0].resources.cpu.request: request 1 exceeds limit 1m"),
        "{e}"
    );
    assert!(
        c.tenants().is_empty(),
        "the tenant of the same batch was not applied either"
    );
    assert!(matches!(
        c.apply(
            Command::DeletePool {
                name: "nope".into()
            },
            t(3)
        ),
        Err(CoordinatorError::UnknownPool(_))
    ));
}
