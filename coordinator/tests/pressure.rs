//! Node pressure degrades the applications running there (issue 19, seed 000
//! §6.4.2): Running -> Degraded naming the node and what its agent measured,
//! Degraded -> Running once no node of theirs is under pressure; applications
//! elsewhere are untouched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn pressure(c: &mut Coordinator, node: &str, what: Option<&str>, now: u64) -> Outcome {
    c.apply(
        Command::NodePressure {
            node: node.into(),
            pressure: what.map(str::to_string),
        },
        t(now),
    )
    .unwrap()
}

fn app_on(name: &str, pool: &str) -> String {
    app_yaml("acme", name, 1, &[("w", "500m", 1, &[])]).replace(
        "  priority: 1\n",
        &format!("  priority: 1\n  pool: {pool}\n"),
    )
}

#[test]
fn pressure_degrades_the_apps_there_until_it_ends() {
    let mut c = Coordinator::new();
    let pools = "apiVersion: daros.io/v1\nkind: ResourcePool\nmetadata: {name: on-n1}\n\
                 spec: {selector: {matchLabels: {host: n1}}}\n---\n\
                 apiVersion: daros.io/v1\nkind: ResourcePool\nmetadata: {name: on-n2}\n\
                 spec: {selector: {matchLabels: {host: n2}}}\n---\n";
    apply(
        &mut c,
        &format!(
            "{}{}{pools}{}",
            node_yaml("n1", "4", "8Gi", "host: n1", ""),
            node_yaml("n2", "4", "8Gi", "host: n2", ""),
            tenant_yaml("acme", "pools: [default, on-n1, on-n2]")
        ),
        0,
    );
    for (name, pool) in [("here", "on-n1"), ("there", "on-n2")] {
        let out = apply(&mut c, &app_on(name, pool), 1);
        for p in started_placements(&out) {
            report_placement(&mut c, &p, ObservedState::Ready, 2);
        }
    }
    let (here, there) = (key("acme", "here"), key("acme", "there"));
    assert_eq!(c.phase(&here), Some(Phase::Running));

    let out = pressure(&mut c, "n1", Some("memory full 14.2% (avg10) >= 10%"), 10);
    assert_eq!(transitions(&out), ["Running->Degraded"]);
    assert_eq!(c.phase(&here), Some(Phase::Degraded));
    assert_eq!(
        c.phase(&there),
        Some(Phase::Running),
        "elsewhere: untouched"
    );
    let reason = &c
        .list_apps(t(10))
        .into_iter()
        .find(|s| s.app == here)
        .unwrap()
        .reason;
    assert_eq!(
        reason,
        "node n1 under pressure: memory full 14.2% (avg10) >= 10%"
    );
    assert_eq!(c.node_pressure("n1").unwrap().since, t(10));
    // Repeated while it lasts: nothing new; a report does not recover it.
    let out = pressure(&mut c, "n1", Some("memory full 20.0% (avg10) >= 10%"), 20);
    assert!(out.events.is_empty(), "{out:?}");
    assert_eq!(c.node_pressure("n1").unwrap().since, t(10));
    c.apply(Command::Tick, t(30)).unwrap();
    assert_eq!(c.phase(&here), Some(Phase::Degraded));

    let out = pressure(&mut c, "n1", None, 40);
    assert_eq!(transitions(&out), ["Degraded->Running"]);
    assert!(c.node_pressure("n1").is_none());
    // Unknown node.
    assert!(
        c.apply(
            Command::NodePressure {
                node: "nope".into(),
                pressure: None
            },
            t(50)
        )
        .is_err()
    );
}
