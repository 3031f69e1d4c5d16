//! A Policy write against the applications it covers (issue 19, seed 000
//! §8.3): a conflict with what already governs a running application is
//! refused naming it; a policy a running application would no longer pass
//! is applied, the application keeps running, and the outcome names it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn policy(name: &str, scope: &str, rules: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: {name}}}\nspec:\n  {scope}\n  rules: {{{rules}}}\n"
    )
}

fn running() -> Coordinator {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}---\n",
            node_yaml("n1", "4", "8Gi", "", ""),
            tenant_yaml("acme", ""),
            policy(
                "platform",
                "scope: Global",
                "allowedRuntimeTypes: [process, container]"
            )
        ),
        0,
    );
    let out = apply(
        &mut c,
        &app_yaml("acme", "web", 100, &[("w", "100m", 1, &[])]),
        1,
    );
    for id in started(&out) {
        report(&mut c, &id, ObservedState::Ready, 2);
    }
    assert_eq!(c.phase(&key("acme", "web")), Some(Phase::Running));
    c
}

#[test]
fn a_policy_conflicting_for_a_running_application_is_refused() {
    let mut c = running();
    let e = c
        .apply(
            Command::Apply {
                documents: docs(&policy(
                    "vm-only",
                    "scope: Tenant\n  tenant: acme",
                    "allowedRuntimeTypes: [vm]",
                )),
                start: true,
            },
            t(3),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("for running application acme/web"), "{e}");
    assert!(e.contains("allowedRuntimeTypes"), "{e}");
    assert!(c.policies().all(|p| p.name != "vm-only"), "nothing written");
}

#[test]
fn a_policy_a_running_application_no_longer_passes_is_applied_and_names_it() {
    let mut c = running();
    let out = apply(
        &mut c,
        &policy(
            "no-process",
            "scope: Global",
            "allowedRuntimeTypes: [container]",
        ),
        3,
    );
    let note = out
        .notes
        .iter()
        .find(|n| n.contains("running application acme/web would not be admitted now"))
        .unwrap_or_else(|| panic!("{:?}", out.notes));
    assert!(note.contains("allowedRuntimeTypes"), "{note}");
    assert_eq!(
        c.phase(&key("acme", "web")),
        Some(Phase::Running),
        "keeps running"
    );
    // Unaffected scopes say nothing.
    let out = apply(
        &mut c,
        &policy(
            "other",
            "scope: Tenant\n  tenant: other",
            "maxOvercommitRatio: 1.0",
        ),
        4,
    );
    assert!(
        out.notes.iter().all(|n| !n.contains("acme/web")),
        "{:?}",
        out.notes
    );
}

#[test]
fn what_if_a_policy_names_the_running_applications_it_would_affect() {
    let c = running();
    let r = c
        .what_if(
            docs(&policy(
                "no-process",
                "scope: Global",
                "allowedRuntimeTypes: [container]",
            )),
            t(3),
        )
        .unwrap();
    assert!(
        r.conflicts
            .iter()
            .any(|x| x.contains("running application acme/web would not be admitted now")),
        "{:?}",
        r.conflicts
    );
    assert!(r.render().contains("acme/web"), "{}", r.render());
    assert!(
        c.policies().all(|p| p.name != "no-process"),
        "nothing changed"
    );
}
