//! Callers' reads and what nodes may claim over the mesh (issue 15). A read
//! asked through the API comes as [`ControlQuery::As`]: the coordinator's
//! access check decides whether the caller may read it at all, and lists are
//! cut to the tenants the caller may read. A write or read arriving from a
//! *client* node speaks for that node only: its local users are not trusted
//! cluster-wide (a token is, being checked against its replicated hash).

use daros_coordinator::access::{Actor, Need, Permission, Scope, Source};
use daros_coordinator::model::policy::PolicyScope;
use daros_coordinator::{CoordinatorError, Timestamp};
use daros_gossip::PeerIdentity;
use daros_gossip::identity::Role as MeshRole;
use serde_json::Value;

use super::state::{
    AccessView, ControlCommand, ControlQuery, CoordinatorState, Failure, FailureKind, Feed, Stamped,
};

fn json<T: serde::Serialize>(v: &T) -> Result<Value, Failure> {
    serde_json::to_value(v).map_err(|e| Failure {
        kind: FailureKind::Conflict,
        message: format!("encoding the answer: {e}"),
    })
}

/// `need` with its permission lowered to reading.
fn read_of(need: Need) -> Need {
    match need {
        Need::Permission { scope, .. } => Need::Permission {
            permission: Permission::Read,
            scope,
        },
        other => other,
    }
}

/// Answers `q` for `actor`: refused (403) when the caller may not read it,
/// else what of it the caller may see.
pub(super) fn answer_as(
    st: &CoordinatorState,
    actor: &Actor,
    now: Timestamp,
    q: &ControlQuery,
) -> Result<Value, Failure> {
    let c = st.coordinator();
    let check = |need: Need, what: &str| -> Result<String, Failure> {
        c.authorize(actor, what, &need, now).map_err(Failure::from)
    };
    let readable = c.readable_tenants(actor, now);
    // A caller without any role reads nothing.
    if readable.as_ref().is_some_and(|s| s.is_empty()) {
        check(Need::global(Permission::Read), "read the control plane")?;
    }
    let may = |t: &str| readable.as_ref().is_none_or(|s| s.contains(t));
    match q {
        ControlQuery::Apps { now } => {
            let mut apps = c.list_apps(*now);
            apps.retain(|a| may(&a.app.tenant));
            json(&apps)
        }
        ControlQuery::Describe { app, .. } | ControlQuery::Explain { app, .. } => {
            check(
                Need::tenant(Permission::Read, &app.tenant),
                &format!("read application {app}"),
            )?;
            // A decision named by number must be this application's.
            if let ControlQuery::Explain {
                decision: Some(d), ..
            } = q
                && c.decision(daros_coordinator::DecisionId(*d))
                    .is_ok_and(|x| x.app != *app)
            {
                return Err(Failure {
                    kind: FailureKind::NotFound,
                    message: format!("application {app} has no decision {d}"),
                });
            }
            st.answer(q)
        }
        ControlQuery::WhatIf { documents, .. } => {
            for d in documents {
                check(
                    read_of(Need::for_document(d)),
                    "predict applying these documents",
                )?;
            }
            st.answer(q)
        }
        ControlQuery::WhatIfNode { node, .. } => {
            check(
                Need::global(Permission::Read),
                &format!("predict the loss of node {node}"),
            )?;
            st.answer(q)
        }
        ControlQuery::Nodes => {
            check(Need::global(Permission::Read), "list nodes")?;
            st.answer(q)
        }
        ControlQuery::Feed {
            after_event,
            after_decision,
            limit,
        } => {
            let (events, scanned_e) = c.events_after_where(*after_event, *limit, &may);
            let (decisions, scanned_d) = c.decisions_after_where(*after_decision, *limit, &may);
            json(&Feed {
                events,
                decisions,
                scanned: Some((scanned_e, scanned_d)),
            })
        }
        ControlQuery::Tenants | ControlQuery::Policies | ControlQuery::Policy { .. } => {
            let v = st.answer(q)?;
            filter_tenant_scoped(q, v, &may)
        }
        ControlQuery::Pools => st.answer(q),
        ControlQuery::Configs { tenant } | ControlQuery::Secrets { tenant } => {
            check(
                Need::tenant(Permission::Read, tenant),
                &format!("read the Configs and Secrets of tenant {tenant}"),
            )?;
            st.answer(q)
        }
        ControlQuery::Audit { filter } => {
            let principal = c.access().resolve(actor, now).unwrap_or_default();
            if c.access()
                .allows(&principal, &Need::global(Permission::PlatformAdmin))
            {
                return json(&c.audit_page(filter, None));
            }
            let admin_of = admin_tenants(st, &principal);
            if admin_of.is_empty() {
                check(
                    Need::global(Permission::PlatformAdmin),
                    "read the audit trail",
                )?;
            }
            json(&c.audit_page(filter, Some(&admin_of)))
        }
        ControlQuery::Access => {
            let principal = c.access().resolve(actor, now).unwrap_or_default();
            let (mut bindings, tokens) = c.access_view();
            if c.access()
                .allows(&principal, &Need::global(Permission::PlatformAdmin))
            {
                return json(&AccessView { bindings, tokens });
            }
            let admin_of = admin_tenants(st, &principal);
            if admin_of.is_empty() {
                check(
                    Need::global(Permission::PlatformAdmin),
                    "list role bindings",
                )?;
            }
            bindings.retain(|b| b.tenant.as_ref().is_some_and(|t| admin_of.contains(t)));
            json(&AccessView {
                bindings,
                tokens: Vec::new(),
            })
        }
        ControlQuery::Authorize { need, what } => Ok(Value::String(check(need.clone(), what)?)),
        ControlQuery::As { .. } => Err(Failure {
            kind: FailureKind::Invalid,
            message: "a read is asked for one caller".into(),
        }),
    }
}

/// Tenants in which `principal` is a Tenant Admin.
fn admin_tenants(st: &CoordinatorState, principal: &str) -> std::collections::BTreeSet<String> {
    st.coordinator()
        .access()
        .roles_of(principal)
        .into_iter()
        .filter(|(r, _)| r.grants(Permission::TenantAdmin))
        .filter_map(|(_, t)| t)
        .collect()
}

/// Tenants, policies: only what belongs to a readable tenant (and global
/// policies, which every caller with a role may read).
fn filter_tenant_scoped(
    q: &ControlQuery,
    v: Value,
    may: &dyn Fn(&str) -> bool,
) -> Result<Value, Failure> {
    let policy_ok = |p: &daros_coordinator::model::policy::Policy| match &p.scope {
        PolicyScope::Global => true,
        PolicyScope::Tenant { tenant } | PolicyScope::Application { tenant, .. } => may(tenant),
    };
    match q {
        ControlQuery::Tenants => {
            let mut t: Vec<super::state::TenantView> = decode(v)?;
            t.retain(|t| may(&t.tenant.name));
            json(&t)
        }
        ControlQuery::Policies => {
            let mut p: Vec<daros_coordinator::model::policy::Policy> = decode(v)?;
            p.retain(policy_ok);
            json(&p)
        }
        _ => {
            let p: super::state::PolicyView = decode(v.clone())?;
            // Any version scoped to a tenant the reader may not read hides it.
            let scoped_elsewhere = p
                .policy
                .iter()
                .chain(p.versions.iter().filter_map(|v| v.policy.as_ref()))
                .any(|p| !policy_ok(p));
            if scoped_elsewhere {
                return Err(
                    CoordinatorError::Forbidden(daros_coordinator::access::Denied {
                        principal: String::new(),
                        source_text: String::new(),
                        verb: "read this policy".into(),
                        need: Need::Permission {
                            permission: Permission::Read,
                            scope: Scope::Global,
                        }
                        .to_string(),
                        missing: "it is scoped to a tenant the caller may not read".into(),
                    })
                    .into(),
                );
            }
            Ok(v)
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, Failure> {
    serde_json::from_value(v).map_err(|e| Failure {
        kind: FailureKind::Conflict,
        message: format!("decoding the answer: {e}"),
    })
}

/// A command from `peer` over the mesh: servers are trusted; a client node
/// reports only for itself, makes no leader decisions, and a request it
/// forwards acts as that node (unless it carries a token).
pub(super) fn admit_command(mut s: Stamped, peer: &PeerIdentity) -> Result<Stamped, String> {
    if let ControlCommand::Coordinator { command } = &s.command
        && let Some(secret) = command.plain_secret()
    {
        return Err(format!(
            "Secret {secret} has values that are not sealed: a server agent seals them before proposing"
        ));
    }
    if peer.role != MeshRole::Client {
        return Ok(s);
    }
    let me = peer.node_id.to_string();
    if s.leader_term.is_some() {
        return Err(format!("client node {me} makes no leader decisions"));
    }
    match &s.command {
        ControlCommand::Report { node, .. }
        | ControlCommand::Reports { node, .. }
        | ControlCommand::Inventory { node, .. } => {
            if *node != me {
                return Err(format!("client node {me} may not report for node {node}"));
            }
            s.actor = None;
            s.at = super::plane::now();
        }
        ControlCommand::Coordinator { .. } => {
            // The leader's clock, not the client's, judges a token's expiry.
            s.at = super::plane::now();
            match s.actor.as_mut().map(|a| &mut a.source) {
                // The token is checked like anywhere; where it came from is
                // this node, whatever the client says.
                Some(Source::Token { node, .. }) => *node = me,
                _ => s.actor = Some(Actor::node(&me)),
            }
        }
    }
    Ok(s)
}

/// A read from `peer`: a client node reads as itself (or a token).
pub(super) fn admit_query(q: ControlQuery, peer: &PeerIdentity) -> Result<ControlQuery, String> {
    if peer.role != MeshRole::Client {
        return Ok(q);
    }
    let me = Actor::node(&peer.node_id.to_string());
    Ok(match q {
        ControlQuery::As {
            mut actor, read, ..
        } => {
            if let Source::Token { node, .. } = &mut actor.source {
                *node = peer.node_id.to_string();
            } else {
                actor = me;
            }
            ControlQuery::As {
                actor,
                now: super::plane::now(),
                read,
            }
        }
        other => ControlQuery::As {
            actor: me,
            now: super::plane::now(),
            read: Box::new(other),
        },
    })
}
