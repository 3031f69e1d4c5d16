//! Policies are versioned (issue 19, seed 000 §8.5): each change is a
//! version, a rollback writes an earlier one again (through the same
//! checks), a deletion is recorded, and the history survives it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::*;

fn policy(ratio: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {{name: p}}\nspec:\n  scope: Global\n  \
         rules: {{maxOvercommitRatio: {ratio}}}\n"
    )
}

fn ratio_in_force(c: &Coordinator) -> Option<String> {
    c.policies()
        .find(|p| p.name == "p")
        .and_then(|p| p.rules.max_overcommit_ratio)
        .map(|r| r.to_string())
}

#[test]
fn changes_are_versions_and_a_rollback_writes_an_earlier_one_again() {
    let mut c = Coordinator::new();
    apply(&mut c, &policy("1.5"), 1);
    apply(&mut c, &policy("1.2"), 2);
    apply(&mut c, &policy("1.2"), 3); // unchanged: no version
    let vs = c.policy_versions("p").unwrap();
    assert_eq!(vs.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2]);
    c.apply(
        Command::RollbackPolicy {
            name: "p".into(),
            version: 1,
        },
        t(4),
    )
    .unwrap();
    assert_eq!(ratio_in_force(&c).as_deref(), Some("1.5"));
    let v3 = c.policy_versions("p").unwrap().last().unwrap().clone();
    assert_eq!((v3.version, v3.rollback_of), (3, Some(1)));
    // A deletion is a version too; the history outlives it.
    c.apply(Command::DeletePolicy { name: "p".into() }, t(5))
        .unwrap();
    assert_eq!(ratio_in_force(&c), None);
    assert!(
        c.policy_versions("p")
            .unwrap()
            .last()
            .unwrap()
            .policy
            .is_none()
    );
    c.apply(
        Command::RollbackPolicy {
            name: "p".into(),
            version: 2,
        },
        t(6),
    )
    .unwrap();
    assert_eq!(ratio_in_force(&c).as_deref(), Some("1.2"));
    // Versions that do not exist, or a deletion, are refused with the reason.
    let e = c
        .apply(
            Command::RollbackPolicy {
                name: "p".into(),
                version: 9,
            },
            t(7),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no version 9 (kept: 1, 2, 3, 4, 5)"), "{e}");
    let e = c
        .apply(
            Command::RollbackPolicy {
                name: "p".into(),
                version: 4,
            },
            t(8),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("is its deletion"), "{e}");
    assert!(matches!(
        c.apply(
            Command::RollbackPolicy {
                name: "nope".into(),
                version: 1
            },
            t(9)
        ),
        Err(CoordinatorError::UnknownPolicy(_))
    ));
}
