//! Bounded history (issue 20): under many changes the logs and versions stay
//! within their retention, numbering goes on, what was dropped is counted per
//! application, a running application's versions in use are never dropped,
//! and asking for a compacted version says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::state::history::Retention;
use daros_coordinator::*;

fn app(env: u32) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: app, tenant: acme}}\nspec:\n  \
         workloads:\n    - {{name: web, runtime: {{type: process}}, \
         resources: {{cpu: {{request: 100m}}, memory: {{request: 16Mi}}}}, \
         runtimeSpec: {{command: /bin/true, env: {{N: \"{env}\"}}}}}}\n"
    )
}

const SMALL: Retention = Retention {
    events: 100,
    decisions: 100,
    evaluations: 100,
    versions: 3,
    audit: 1_000,
};

#[test]
fn history_stays_within_its_retention_and_says_what_it_dropped() {
    let mut c = Coordinator::new();
    c.apply(Command::SetRetention { retention: SMALL }, t(0))
        .unwrap();
    apply(
        &mut c,
        &format!(
            "{}{}",
            node_yaml("n1", "8", "16Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        1,
    );
    let k = key("acme", "app");
    // Running at version 1: its instance runs version 1.
    let out = apply(&mut c, &app(0), 2);
    let v1 = started_placements(&out).pop().unwrap();
    report_placement(&mut c, &v1, ObservedState::Running, 3);
    for n in 1..=300u32 {
        c.apply(
            Command::Apply {
                documents: docs(&app(n)),
                start: false,
            },
            t(10 + u64::from(n)),
        )
        .unwrap();
        assert!(c.events().len() <= 125, "{}", c.events().len());
        assert!(c.decisions().len() <= 125);
        assert!(c.evaluations().len() <= 125);
    }
    let d = c.describe(&k, t(1_000)).unwrap();
    assert_eq!(d.version, 301, "numbering goes on");
    let kept: Vec<u32> = d.versions.iter().map(|v| v.version).collect();
    // Stop-first rollout: every update replaces the one replica; the versions its
    // instance and the copy it replaces run are in use and kept.
    assert!(kept.len() <= 5, "{kept:?}");
    assert_eq!(*kept.last().unwrap(), 301);
    assert_eq!(d.compacted.versions, 301 - kept.len() as u64);
    assert!(d.compacted.events > 0 && d.compacted.decisions > 0, "{d:?}");
    assert!(d.render().contains("older than those kept (retention)"));
    // Every kept event and decision still resolves by its number.
    for id in &d.decisions {
        c.decision(*id).unwrap();
    }
    let e = c.decision(DecisionId(1)).unwrap_err();
    assert!(matches!(e, CoordinatorError::UnknownDecision(_)), "{e}");
    let seqs: Vec<u64> = c.events().iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
    assert!(seqs[0] > 1);

    // A compacted version is named as such; a kept one rolls back.
    let e = c
        .apply(
            Command::Rollback {
                app: k.clone(),
                version: 2,
            },
            t(2_000),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "application acme/app: version 2 was compacted away by retention (the oldest kept is {}; \
             `darosctl describe app` lists them)",
            kept[0]
        )
    );
    let back = kept[kept.len() - 2];
    c.apply(
        Command::Rollback {
            app: k.clone(),
            version: back,
        },
        t(2_001),
    )
    .unwrap();
    assert_eq!(c.spec(&k).unwrap().0, 302);
}

#[test]
fn a_retention_below_its_minimum_is_refused_by_field() {
    let mut c = Coordinator::new();
    let e = c
        .apply(
            Command::SetRetention {
                retention: Retention {
                    events: 5,
                    ..Retention::default()
                },
            },
            t(0),
        )
        .unwrap_err();
    let s = e.to_string();
    assert!(s.contains("retention.events"), "{s}");
    assert!(s.contains("5 is below the minimum 100"), "{s}");
}
