//! Access checks and the audit trail in the coordinator (issue 15): what
//! each command needs, a forbidden command changes nothing and is audited,
//! an applied one is audited with its raft index, tokens resolve, and
//! retention compacts the trail with a record saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::access::{Actor, ApiToken, Need, Permission, Role, RoleBinding, Source};
use daros_coordinator::state::audit::{AuditFilter, AuditOutcome};
use daros_coordinator::state::history::Retention;
use daros_coordinator::*;

fn user(name: &str) -> Actor {
    Actor::socket("n1", 1000, Some(name))
}

fn bind(c: &mut Coordinator, name: &str, principal: &str, role: Role, tenant: Option<&str>) {
    c.apply(
        Command::Bind {
            binding: RoleBinding {
                name: name.into(),
                principal: principal.into(),
                role,
                tenant: tenant.map(Into::into),
            },
        },
        t(0),
    )
    .unwrap();
}

#[test]
fn forbidden_changes_nothing_and_everything_is_audited() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{}",
            node_yaml("n1", "4", "8Gi", "", ""),
            tenant_yaml("a", ""),
            tenant_yaml("b", "")
        ),
        0,
    );
    bind(&mut c, "dev", "user:dev", Role::Developer, Some("a"));
    let app_a = docs(&app_yaml("a", "web", 1, &[("w", "100m", 1, &[])]));
    let app_b = docs(&app_yaml("b", "web", 1, &[("w", "100m", 1, &[])]));
    // Developer of a: applies in a; not in b; may not stop (operate).
    c.apply_as(
        &user("dev"),
        10,
        Command::Apply {
            documents: app_a,
            start: true,
        },
        t(1_000),
    )
    .unwrap();
    let e = c
        .apply_as(
            &user("dev"),
            11,
            Command::Apply {
                documents: app_b,
                start: true,
            },
            t(2_000),
        )
        .unwrap_err();
    assert!(matches!(e, CoordinatorError::Forbidden(_)), "{e}");
    assert!(
        c.phase(&key("b", "web")).is_none(),
        "nothing of b was created"
    );
    let stop = Command::Operate {
        app: key("a", "web"),
        operation: OperationRequest::Stop,
    };
    let e = c
        .apply_as(&user("dev"), 12, stop.clone(), t(3_000))
        .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("user:dev") && m.contains("operate in tenant a"),
        "{m}"
    );
    assert_eq!(c.phase(&key("a", "web")), Some(Phase::Scheduled));
    // An invalid binding is refused by field, and audited as refused.
    let e = c
        .apply_as(
            &Actor::socket("n1", 0, None),
            13,
            Command::Bind {
                binding: RoleBinding {
                    name: "Bad Name".into(),
                    principal: "alice".into(),
                    role: Role::TenantAdmin,
                    tenant: None,
                },
            },
            t(4_000),
        )
        .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("name") && m.contains("principal") && m.contains("tenant"),
        "{m}"
    );

    let page = c.audit_page(&AuditFilter::default(), None);
    let r = &page.records;
    assert_eq!(r.len(), 4, "{r:?}");
    assert_eq!((r[0].index, &r[0].outcome), (10, &AuditOutcome::Applied));
    assert_eq!(r[0].tenants, ["a"]);
    assert!(matches!(r[1].outcome, AuditOutcome::Forbidden { .. }));
    assert_eq!(r[1].tenants, ["b"]);
    assert_eq!(r[2].verb, "Operate.stop");
    assert!(matches!(r[3].outcome, AuditOutcome::Refused { .. }));
    assert_eq!(r[3].principal, "root");
    // Removing a binding is recorded under the tenant it held in.
    c.apply_as(
        &Actor::socket("n1", 0, None),
        14,
        Command::Unbind { name: "dev".into() },
        t(5_000),
    )
    .unwrap();
    let last = c.audit_page(
        &AuditFilter {
            after: 4,
            ..AuditFilter::default()
        },
        None,
    );
    assert_eq!(last.records[0].tenants, ["a"], "{:?}", last.records);
    // A reader of tenant a sees a's records only.
    let only_a = std::collections::BTreeSet::from(["a".to_string()]);
    let mine = c.audit_page(&AuditFilter::default(), Some(&only_a));
    assert_eq!(mine.records.len(), 3);
}

#[test]
fn what_each_command_needs() {
    let c = Coordinator::new();
    let needs = |cmd: Command| c.needs(&cmd);
    assert_eq!(
        needs(Command::Operate {
            app: key("a", "x"),
            operation: OperationRequest::Delete
        }),
        [Need::tenant(Permission::Develop, "a")]
    );
    assert_eq!(
        needs(Command::DrainNode { name: "n1".into() }),
        [Need::global(Permission::PlatformAdmin)]
    );
    assert_eq!(
        needs(Command::NodePressure {
            node: "n1".into(),
            pressure: None
        }),
        [Need::OwnNode("n1".into())]
    );
    let docs = docs(&format!(
        "{}{}",
        tenant_yaml("a", ""),
        app_yaml("a", "x", 1, &[("w", "1", 1, &[])])
    ));
    assert_eq!(
        needs(Command::Apply {
            documents: docs,
            start: true
        }),
        [
            Need::tenant(Permission::Develop, "a"),
            Need::global(Permission::PlatformAdmin)
        ]
    );
}

#[test]
fn tokens_expire_and_are_revoked_and_the_trail_says_what_retention_dropped() {
    let mut c = Coordinator::new();
    apply(&mut c, &tenant_yaml("a", ""), 0);
    bind(&mut c, "ci", "user:ci", Role::Operator, Some("a"));
    let hash = "ab".repeat(32);
    c.apply(
        Command::IssueToken {
            token: ApiToken {
                id: "t1".into(),
                principal: "user:ci".into(),
                sha256: hash.clone(),
                issued: t(0),
                expires: Some(t(10_000)),
                revoked: None,
            },
        },
        t(0),
    )
    .unwrap();
    let tok = |h: &str| Actor {
        principal: "token:t1".into(),
        source: Source::Token {
            node: "n1".into(),
            id: "t1".into(),
            sha256: h.into(),
        },
    };
    let read = Need::tenant(Permission::Read, "a");
    assert_eq!(
        c.authorize(&tok(&hash), "read", &read, t(5_000)).unwrap(),
        "user:ci"
    );
    assert!(
        c.authorize(&tok(&"cd".repeat(32)), "read", &read, t(5_000))
            .is_err()
    );
    assert!(
        c.authorize(&tok(&hash), "read", &read, t(10_000)).is_err(),
        "expired"
    );
    c.apply(Command::RevokeToken { id: "t1".into() }, t(6_000))
        .unwrap();
    let e = c
        .authorize(&tok(&hash), "read", &read, t(7_000))
        .unwrap_err();
    assert!(e.to_string().contains("revoked"), "{e}");
    let (_, tokens) = c.access_view();
    assert_eq!(tokens[0].revoked, Some(t(6_000)));

    // Retention: 1,000 records kept; what goes is announced.
    c.apply(
        Command::SetRetention {
            retention: Retention {
                audit: 1_000,
                ..Retention::default()
            },
        },
        t(0),
    )
    .unwrap();
    let root = Actor::socket("n1", 0, None);
    for i in 0..1_300u64 {
        c.apply_as(
            &root,
            100 + i,
            Command::Bind {
                binding: RoleBinding {
                    name: format!("b{i}"),
                    principal: "user:x".into(),
                    role: Role::Viewer,
                    tenant: Some("a".into()),
                },
            },
            t(20_000 + i),
        )
        .unwrap();
    }
    let page = c.audit_page(
        &AuditFilter {
            limit: Some(5_000),
            ..AuditFilter::default()
        },
        None,
    );
    assert!(page.compacted > 0);
    let compacted: Vec<_> = page
        .records
        .iter()
        .filter(|r| matches!(r.outcome, AuditOutcome::Compacted { .. }))
        .collect();
    assert_eq!(compacted.len(), 1, "one compaction so far");
    assert!(
        compacted[0].objects[0].contains("dropped"),
        "{:?}",
        compacted[0]
    );
    assert_eq!(
        page.records.len() as u64 + page.compacted,
        1_301,
        "every record accounted for"
    );
}

/// A tenant's admin may not overwrite what is not its tenant's: a global
/// policy of the same name, a cluster-wide binding of the same name; an
/// `Expect` needs reading the application it names.
#[test]
fn tenant_admins_cannot_replace_what_is_not_theirs() {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!("{}{}", tenant_yaml("a", ""), tenant_yaml("b", "")),
        0,
    );
    apply(
        &mut c,
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: baseline}\nspec:\n  scope: Global\n  rules: {}\n",
        0,
    );
    bind(&mut c, "ops", "user:ops", Role::PlatformAdmin, None);
    bind(&mut c, "ta", "user:ta", Role::TenantAdmin, Some("a"));
    let ta = user("ta");
    let scoped = docs(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: baseline}\nspec:\n  scope: Tenant\n  tenant: a\n  rules: {}\n",
    );
    let e = c
        .apply_as(
            &ta,
            1,
            Command::Apply {
                documents: scoped,
                start: false,
            },
            t(1),
        )
        .unwrap_err();
    assert!(e.to_string().contains("platform-admin"), "{e}");
    let e = c
        .apply_as(
            &ta,
            2,
            Command::Bind {
                binding: RoleBinding {
                    name: "ops".into(),
                    principal: "user:ta".into(),
                    role: Role::Viewer,
                    tenant: Some("a".into()),
                },
            },
            t(2),
        )
        .unwrap_err();
    assert!(e.to_string().contains("platform-admin"), "{e}");
    let (bindings, _) = c.access_view();
    assert!(
        bindings
            .iter()
            .any(|b| b.name == "ops" && b.role == Role::PlatformAdmin)
    );
    let e = c
        .apply_as(
            &ta,
            3,
            Command::Expect {
                app: key("b", "x"),
                version: 0,
                then: Box::new(Command::Operate {
                    app: key("a", "x"),
                    operation: OperationRequest::Start,
                }),
            },
            t(3),
        )
        .unwrap_err();
    assert!(e.to_string().contains("read in tenant b"), "{e}");
}
